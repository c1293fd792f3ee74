"""What the user asked `mur deploy` for (built by mur/cli/deploy.py, read by the providers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mur.deploy.targets import TargetSpec


@dataclass(frozen=True)
class DeployRequest:
    manifest: Path
    target: TargetSpec
    workdir: Path | None = None
    env_args: tuple[str, ...] = ()
    env_file: Path | None = None
    release_source: str | None = None
    mur_binary: Path | None = None
    use_bundle: bool = False
    publish: bool = False
    init: str = "auto"
    containment: str | None = None
    trust_new_host: bool = False
    deployment_id: str | None = None
    start_timeout: float = 180.0
    base_image: str = "mur-base:bookworm"
    seccomp_profile: str | None = None
    keep_lifecycle: bool = False
    precompile: bool = True
    keep_sessions: int = 5
    no_boot_hook: bool = False
    tls: str | None = None  # "self-signed"
    tls_cert: Path | None = None
    tls_key: Path | None = None
