"""`mur new KIND NAME`: write a starter project from the templates beside this file.

  capsule  a plain capsule (capsule.wasm from app.py): `mur build NAME && mur run -m NAME -t Ada`
  tool     a WASM tool plus a demo capsule calling it (NAME/demo)
  agent    an agent capsule with the first-party Anthropic driver (NAME/driver), run offline against
           the loopback model server replaying NAME/replies.yaml

`__NAME__` in a template becomes NAME and `__MODEL_SERVER__` the command that starts the model
server. The agent's driver sources are the repository's examples/murmur-driver-anthropic (linked into
the templates, copied into wheels), so a scaffold and the example never drift. Nothing is written
when NAME is not an artifact name or the directory already exists and is not empty.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mur.errors import MurError

KINDS = ("capsule", "tool", "agent")
TEMPLATES = Path(__file__).parent / "templates"
# The loopback Anthropic-Messages server the agent scaffold runs against (one place to change it).
MODEL_SERVER_MODULE = "mur.testing.modelserver"
MODEL_SERVER_PORT = 8765


def model_server_command() -> str:
    """How a user starts the loopback model server from a shell: `python` when that is the
    interpreter running mur (an active venv), else that interpreter's path. Debian has no `python`,
    and a mur run as .venv/bin/mur, its venv not active, is not importable by the one on PATH."""
    found = shutil.which("python")
    if found and os.path.abspath(found) == os.path.abspath(sys.executable):
        return f"python -m {MODEL_SERVER_MODULE}"
    return f"{shlex.quote(sys.executable)} -m {MODEL_SERVER_MODULE}"


def mur_command() -> str:
    """`mur` when a `mur` is on PATH, else the console script beside this interpreter (a mur run
    as .venv/bin/mur prints steps that work as printed)."""
    script = Path(sys.executable).parent / "mur"
    if shutil.which("mur") is None and script.is_file():
        return shlex.quote(str(script))
    return "mur"


@dataclass
class Scaffold:
    kind: str
    root: Path
    files: list[Path] = field(default_factory=list)

    def next_steps(self) -> list[str]:
        """The commands that build and run the new project, offline."""
        shown = os.path.relpath(self.root) if not os.path.relpath(self.root).startswith("..") else str(self.root)
        mur = mur_command()
        if self.kind == "capsule":
            return [f"{mur} build {shown}", f'{mur} run -m {shown} -t "Ada"']
        if self.kind == "tool":
            return [f"{mur} build {shown}", f"{mur} build {shown}/demo", f'{mur} run -m {shown}/demo -t "Ada"']
        return [f"{mur} build {shown}",
                f"{model_server_command()} --script {shown}/replies.yaml --port {MODEL_SERVER_PORT} &",
                f'{mur} run -m {shown} -t "Say hello"']

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": str(self.root), "files": [str(f) for f in self.files],
                "next": self.next_steps()}


def scaffold(kind: str, name: str, parent: Path | None = None) -> Scaffold:
    """Write the `kind` starter project into `<parent>/<name>/`."""
    from mur.manifest.artifact import validate_artifact_name

    if kind not in KINDS:
        raise MurError("E-IO-003", f"unknown project kind '{kind}'", f"use one of: {', '.join(KINDS)}")
    validate_artifact_name(name)  # the name is the artifact's and the directory's
    root = Path(parent or Path.cwd()) / name
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise MurError("E-IO-003", f"{root} already exists", "choose another NAME, or remove that directory")
    sources = sorted(p for p in (TEMPLATES / kind).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    done = Scaffold(kind, root)
    try:
        for source in sources:
            rel = Path(str(source.relative_to(TEMPLATES / kind)).replace("__NAME__", name))
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            text = source.read_text(encoding="utf-8")
            text = text.replace("__NAME__", name).replace("__MODEL_SERVER__", model_server_command())
            target.write_text(text, encoding="utf-8")
            done.files.append(target)
    except OSError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise MurError("E-IO-003", f"cannot write {root}: {exc.strerror or exc}") from exc
    return done
