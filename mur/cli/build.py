"""`mur build [SOURCE] [-o OUT]`: pack an artifact directory into `<name>-<version>.mur.zip`."""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("build")
    def build(
        source: str = typer.Argument(".", help="Artifact source directory (holds murmur.yaml)."),
        output: Optional[str] = typer.Option(
            None, "--output", "-o", help="Output .mur.zip path, or an existing directory to write into."
        ),
    ) -> None:
        """Build a .mur.zip from murmur.yaml plus exactly its requires_files."""
        from mur.artifacts.build import build_artifact

        path = build_artifact(source, output)
        print(f"Built artifact: {path}", flush=True)
