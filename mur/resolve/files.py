"""Local files as the resolve step records them: path, place relative to murmur.yaml, digest."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mur.fsutil import file_sha256


@dataclass(frozen=True)
class FileRef:
    """A local file and where it goes, relative to its destination root.

    `rel` is the POSIX path relative to the manifest directory (or the destination root); None when
    the file lies outside it (a run may use it, a deploy cannot upload it: E-DEPLOY-001).
    `origin` names the manifest field that brought the file in (for error messages).
    """

    src: str
    rel: str | None
    sha256: str
    size: int = 0
    mode: int = 0o644
    origin: str = ""


def file_ref(path: Path, rel: str | None, origin: str = "", hashed: bool = True) -> FileRef:
    """Hash and stat one file (mode keeps only whether it is executable). `hashed=False` leaves
    sha256 empty: for `mur run`, which locates files but never reads their digests (the engine
    hashes what it compiles itself), so an 18 MB component is not hashed for nothing."""
    st = path.stat()
    digest = file_sha256(path) if hashed else ""
    return FileRef(str(path), rel, digest, st.st_size, 0o755 if st.st_mode & 0o111 else 0o644, origin)


def relative_to(base: Path, path: Path) -> str | None:
    """`path` relative to `base` (both resolved), or None when it is not below it."""
    base, path = base.resolve(), path.resolve()
    if path == base or base in path.parents:
        return path.relative_to(base).as_posix()
    return None


def walk_files(root: Path, prefix: str | None, origin: str = "", hashed: bool = True) -> list[FileRef]:
    """Every regular file below `root` (symlinks and __pycache__ skipped), sorted; rel = prefix + path."""
    refs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            refs.append(file_ref(p, None if prefix is None else f"{prefix}{rel}", origin, hashed))
    return refs
