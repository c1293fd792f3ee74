"""What `mur run` was asked to do, as plain data (the CLI fills it; the runtime reads it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunOptions:
    manifest: Path = Path("murmur.yaml")
    task: str | None = None
    system_prompt: str | None = None
    task_acceptance: str | None = None
    after_task: str | None = None
    workdir: Path | None = None
    json: bool = False
    verbose: bool = False
    bind: str = "127.0.0.1"
    port: int | None = None
    no_env_file: bool = False
    containment: str | None = None
    explain_scope: bool = False
    a2a_token_file: Path | None = None  # the door wants this bearer token (mur.a2a.auth)
    tls_cert: Path | None = None  # the door speaks HTTPS with this certificate and key
    tls_key: Path | None = None
