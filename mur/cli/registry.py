"""`mur registry serve`: run a Nexus-compatible artifact registry on this machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    name="registry",
    help="Run a Nexus-compatible artifact registry.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@app.command("serve")
def serve(
    bind: Optional[str] = typer.Option(
        None, "--bind", help="host:port to listen on (default $NEXUS_BIND or 127.0.0.1:7800; port 0 = any free)."
    ),
    data: Optional[Path] = typer.Option(
        None, "--data", help="Directory holding the artifacts (default $NEXUS_DATA or ~/.murmur/registry)."
    ),
) -> None:
    """Serve POST/GET /v1/artifacts with bearer NEXUS_API_KEY, storing on disk."""
    from mur.artifacts.registry_server import DEFAULT_BIND, serve as run_server
    from mur.paths import registry_data_dir

    address = bind or os.environ.get("NEXUS_BIND") or DEFAULT_BIND
    if data is None:
        data = registry_data_dir()

    def ready(url: str) -> None:
        print(f"mur registry: listening on {url} (data: {data})", flush=True)

    run_server(address, data, os.environ.get("NEXUS_API_KEY", ""), on_ready=ready)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="registry")
