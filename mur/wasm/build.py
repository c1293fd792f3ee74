"""Build Python guest components with componentize-py, cached by a hash of every input.

    python -m mur.wasm.build examples            # every guest dir under examples/
    python -m mur.wasm.build examples/hello/greet

A guest dir holds ``app.py`` (module ``app``) next to a ``murmur.yaml``. The world and the output
name come from that manifest: an artifact manifest (``runtime: tool|driver|hook``) builds that
world into the single ``.wasm`` its ``requires_files`` names (else ``<name>.wasm``); a capsule
manifest (no ``runtime:``) builds the ``capsule`` world into ``capsule.wasm``.

A build costs seconds of CPU and 18 MB of output, so outputs live in
``<cache>/components/<key>/`` where the key hashes the componentize-py version, the world, the WIT
files and the guest's ``*.py`` sources; the dir's copy is refreshed only when it differs. A second
run with nothing changed compiles nothing.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Callable

from mur.errors import MurError
from mur.paths import cache_root
from mur.fsutil import mark_used
from mur.wasm.engine import file_sha256

WIT_ROOT = Path(__file__).parent / "wit"
WORLD_PACKAGES = {"capsule": "guest", "tool": "guest", "driver": "guest", "hook": "hook"}
MODULE = "app"
NO_COMPONENTIZE = "componentize-py is not installed: it builds a Python guest (app.py) into a .wasm"


def wit_dir_for(world: str) -> Path:
    """The WIT root (a package dir with deps/) that defines `world`."""
    try:
        return WIT_ROOT / WORLD_PACKAGES[world]
    except KeyError:
        raise MurError("E-BLD-010", f"unknown guest world '{world}'",
                       f"use one of: {', '.join(WORLD_PACKAGES)}") from None


def componentize_py() -> list[str]:
    """The componentize-py command (next to this interpreter, else on PATH)."""
    beside = Path(sys.executable).parent / "componentize-py"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("componentize-py")
    if found:
        return [found]
    raise MurError("E-BLD-010", NO_COMPONENTIZE,
                   "pip install 'mur[guest]' (in a checkout: scripts/bootstrap, or pip install -e '.[guest]')")


def _files(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if path.is_file() and path.suffix in suffixes:
            out.append(path)
    return out


def guest_sources(src_dir: Path) -> list[Path]:
    """The guest's Python files: top-level *.py plus packages (dirs with __init__.py).

    Nested guest dirs (their own murmur.yaml) and everything else (built .wasm files, data) stay
    out, so a capsule dir holding its tools' dirs does not bundle them.
    """
    out = sorted(p for p in src_dir.glob("*.py") if p.is_file())
    for pkg in sorted(p for p in src_dir.iterdir() if p.is_dir() and (p / "__init__.py").is_file()):
        if not pkg.name.startswith(".") and not (pkg / "murmur.yaml").exists():
            out.extend(_files(pkg, (".py",)))
    return out


def build_key(src_dir: Path, world: str, wit_dir: Path, module: str = MODULE) -> str:
    """Hash of everything that determines the component's bytes."""
    try:
        tool_version = metadata.version("componentize-py")
    except metadata.PackageNotFoundError:
        tool_version = "unknown"
    digest = hashlib.sha256(f"componentize-py {tool_version}\nworld {world}\nmodule {module}\n".encode())
    for label, root, files in (("wit", wit_dir, _files(wit_dir, (".wit",))),
                               ("src", src_dir, guest_sources(src_dir))):
        for path in files:
            digest.update(f"{label}:{path.relative_to(root).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


def check_syntax(src_dir: Path) -> None:
    """E-BLD-010 naming file, line and column for a guest source Python cannot parse (in milliseconds,
    where componentize-py would report it only after a minute)."""
    for path in guest_sources(src_dir):
        try:
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            where = f"{path}:{exc.lineno or 0}:{exc.offset or 0}"
            raise MurError("E-BLD-010", f"{where}: {type(exc).__name__}: {exc.msg}",
                           "fix the Python source; nothing was built") from None
        except (OSError, ValueError) as exc:
            raise MurError("E-BLD-010", f"cannot read guest source {path}: {exc}") from exc


def build_component(src_dir: Path, world: str, *, wit_dir: Path | None = None, module: str = MODULE,
                    cache_dir: Path | None = None, on_compile: Callable[[str], None] | None = None) -> Path:
    """Build (or reuse) the component for `src_dir`; returns the cached .wasm path.

    `on_compile` hears one line before componentize-py runs (a cache miss: about a minute)."""
    src_dir = Path(src_dir).resolve()
    wit_dir = Path(wit_dir).resolve() if wit_dir else wit_dir_for(world)
    if not (src_dir / f"{module}.py").is_file():
        raise MurError("E-BLD-010", f"no {module}.py in {src_dir}")
    check_syntax(src_dir)
    root = Path(cache_dir) if cache_dir else cache_root() / "components"
    key = build_key(src_dir, world, wit_dir, module)
    out_dir = root / key
    out = out_dir / f"{world}.wasm"
    if out.is_file():
        mark_used(out)  # used now: `mur gc` removes builds unused for a while (by mtime)
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build of the same key waits, then reuses
        if out.is_file():
            return out
        tmp = out_dir / f".{world}.{os.getpid()}.wasm"
        command = componentize_py()
        if on_compile is not None:
            on_compile(f"compiling {src_dir} ({world} world) with componentize-py; the first build takes about a minute")
        with tempfile.TemporaryDirectory(prefix="mur-guest-") as stage:
            for path in guest_sources(src_dir):  # build from a copy: only the guest's sources
                target = Path(stage) / path.relative_to(src_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
            cmd = command + ["-q", "-d", str(wit_dir), "-w", world, "componentize", module,
                                       "-p", stage, "-o", str(tmp)]
            env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            proc = subprocess.run(cmd, cwd=stage, capture_output=True, text=True, env=env)
        if proc.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            detail = _summarize(proc.stderr or proc.stdout)
            raise MurError("E-BLD-010", f"componentize-py failed for {src_dir} (world {world}): {detail}")
        os.replace(tmp, out)
    return out


def _summarize(text: str) -> str:
    """The useful part of componentize-py's error (it appends a long Rust backtrace)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    cut = next((i for i, ln in enumerate(lines) if ln.startswith("Stack backtrace")), len(lines))
    kept = [ln.strip() for ln in lines[:cut] if "componentize-py" not in ln and not ln.startswith("  File")]
    return " | ".join(kept[-6:]) or "no output"


def guest_target(guest_dir: Path) -> tuple[str, str]:
    """(world, output file name) for a guest dir, from its murmur.yaml."""
    import yaml

    manifest = guest_dir / "murmur.yaml"
    try:
        data = yaml.safe_load(manifest.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise MurError("E-BLD-010", f"cannot read {manifest}: {exc}") from exc
    runtime = data.get("runtime")
    if runtime is None:
        return "capsule", "capsule.wasm"
    if runtime not in ("tool", "driver", "hook"):
        raise MurError("E-BLD-010", f"{manifest}: runtime '{runtime}' has no WASM world")
    wasm = [f for f in data.get("requires_files") or [] if str(f).endswith(".wasm")]
    if len(wasm) > 1:
        raise MurError("E-BLD-010", f"{manifest}: requires_files names more than one .wasm")
    return runtime, (str(wasm[0]) if wasm else f"{data.get('name', guest_dir.name)}.wasm")


def build_guest_dir(guest_dir: Path, *, cache_dir: Path | None = None,
                    on_compile: Callable[[str], None] | None = None) -> tuple[Path, bool]:
    """Build one guest dir and place its .wasm; returns (path, changed)."""
    guest_dir = Path(guest_dir)
    world, name = guest_target(guest_dir)
    built = build_component(guest_dir, world, cache_dir=cache_dir, on_compile=on_compile)
    dest = guest_dir / name
    if dest.is_file() and dest.stat().st_size == built.stat().st_size and file_sha256(dest) == file_sha256(built):
        return dest, False
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(built, tmp)
    os.replace(tmp, dest)
    return dest, True


def is_guest_dir(path: Path) -> bool:
    """A dir holding both murmur.yaml and app.py: `mur build` compiles it first."""
    return (Path(path) / "murmur.yaml").is_file() and (Path(path) / f"{MODULE}.py").is_file()


def guests_of(guest_dir: Path) -> list[Path]:
    """`guest_dir` when it holds app.py, and for a capsule the guest dirs its local-source artifacts
    point at (its tools, its driver)."""
    import yaml

    guest_dir = Path(guest_dir)
    found = [guest_dir] if is_guest_dir(guest_dir) else []
    if guest_target(guest_dir)[0] != "capsule":
        return found
    try:
        data = yaml.safe_load((guest_dir / "murmur.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return found  # the capsule's own load reports it, with the proper code
    for decl in data.get("artifacts") or []:
        if isinstance(decl, dict) and isinstance(decl.get("source"), str) and decl.get("local_source") is True:
            source = (guest_dir / decl["source"]).resolve()
            if source.is_dir() and is_guest_dir(source) and source not in found:
                found.append(source)
    return found


def build_guests(guest_dir: Path, *, progress: Callable[[str], None] | None = None) -> list[tuple[Path, bool]]:
    """Build a guest dir (and a capsule's local-source guests); [(placed .wasm, changed)].

    Without componentize-py, a .wasm already in place is kept as is (a project shipped prebuilt
    still packs) and `progress` hears so; only a missing one is an error."""
    out = []
    for directory in guests_of(guest_dir):
        try:
            out.append(build_guest_dir(directory, on_compile=progress))
        except MurError as err:
            dest = directory / guest_target(directory)[1]
            if err.message != NO_COMPONENTIZE or not dest.is_file():
                raise
            if progress is not None:
                progress(f"note: componentize-py is not installed; packing the existing {dest} as it is "
                         "(pip install 'mur[guest]' to rebuild it from app.py)")
            out.append((dest, False))
    return out


def find_guest_dirs(root: Path) -> list[Path]:
    """Every dir under `root` (itself included) with both murmur.yaml and app.py."""
    root = Path(root)
    candidates = [root] + [p for p in sorted(root.rglob("*")) if p.is_dir()]
    return [d for d in candidates
            if (d / "murmur.yaml").is_file() and (d / f"{MODULE}.py").is_file()
            and not any(part.startswith(".") or part == "__pycache__" for part in d.parts)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mur.wasm.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="guest dirs, or dirs to search for them")
    args = parser.parse_args(argv)
    try:
        dirs = [d for p in args.paths for d in find_guest_dirs(p)]
        if not dirs:
            raise MurError("E-BLD-010", "no guest dirs (murmur.yaml + app.py) under "
                           + ", ".join(str(p) for p in args.paths))
        for d in dirs:
            print(f"building {d} ...", file=sys.stderr, flush=True)
            dest, changed = build_guest_dir(d)
            print(f"{'built' if changed else 'up to date'}: {dest}", file=sys.stderr, flush=True)
    except MurError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
