"""Options several command groups take, spelled once (their help, their meaning)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mur.paths import manifest_path

MANIFEST_HELP = "Capsule manifest: a file, or a directory holding murmur.yaml."

# `-m DIR` means DIR/murmur.yaml for every command that reads a capsule, as for `mur build DIR`.
Manifest = Annotated[Path, typer.Option("--manifest", "-m", help=MANIFEST_HELP, callback=manifest_path)]
