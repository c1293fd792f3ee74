"""The capsule layer: a tar that mur writes itself, so the same inputs give the same bytes.

Why not `docker build`: the legacy builder stamps every layer and the image config with the build
time, and a COPY layer's file metadata depends on the build host. Here every entry is listed in
one sorted order (parents first), with one fixed mtime, explicit owners (root, or the capsule
user for what it must own) and normalized modes (0755 / 0644, 0700 / 0600 for the private compile
cache); the layer's digest (its diff_id) is then a function of the file contents alone.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mur.errors import MurError


@dataclass(frozen=True)
class Entry:
    """One tar entry: a directory, a file (bytes or a local file) or a symlink."""

    path: str  # relative, no leading slash
    kind: str  # "dir" | "file" | "symlink"
    mode: int
    uid: int = 0
    gid: int = 0
    data: bytes | None = None
    src: str | None = None
    target: str = ""


class Layer:
    """A set of entries, written as a reproducible tar."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def _put(self, entry: Entry) -> None:
        path = _clean(entry.path)
        parts = path.split("/")
        for i in range(1, len(parts)):  # parents default to root:root 0755 unless set explicitly
            parent = "/".join(parts[:i])
            self.entries.setdefault(parent, Entry(parent, "dir", 0o755))
        self.entries[path] = Entry(path, entry.kind, entry.mode, entry.uid, entry.gid, entry.data, entry.src,
                                   entry.target)

    def dir(self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        self._put(Entry(path, "dir", mode, uid, gid))

    def file(self, path: str, *, data: bytes | None = None, src: str | Path | None = None, mode: int = 0o644,
             uid: int = 0, gid: int = 0) -> None:
        if (data is None) == (src is None):
            raise ValueError("a file entry takes exactly one of data or src")
        self._put(Entry(path, "file", mode, uid, gid, data, str(src) if src is not None else None))

    def symlink(self, path: str, target: str) -> None:
        self._put(Entry(path, "symlink", 0o777, target=target))

    def tree(self, root: Path, prefix: str, uid: int = 0, gid: int = 0) -> None:
        """Every file, directory and symlink under `root`, with modes normalized to 0755/0644."""
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            base = Path(dirpath)
            rel = base.relative_to(root).as_posix()
            here = prefix if rel == "." else f"{prefix}/{rel}"
            self.dir(here, 0o755, uid, gid)
            for name in sorted(dirnames + filenames):
                p = base / name
                dest = f"{here}/{name}"
                if p.is_symlink():
                    self.symlink(dest, os.readlink(p))
                elif p.is_file():
                    self.file(dest, src=p, mode=0o755 if os.stat(p).st_mode & 0o111 else 0o644, uid=uid, gid=gid)

    def write(self, out: BinaryIO, mtime: int) -> str:
        """Write the tar to `out`; returns its sha256 (the layer's diff_id, without the prefix)."""
        sink = _HashingWriter(out)
        with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.entries, key=lambda p: p.split("/")):
                e = self.entries[path]
                info = tarfile.TarInfo(e.path)
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, e.uid, e.gid, "", ""
                info.mode = e.mode
                if e.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif e.kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, e.target
                    tar.addfile(info)
                elif e.data is not None:
                    info.size = len(e.data)
                    tar.addfile(info, io.BytesIO(e.data))
                else:
                    with open(e.src, "rb") as fh:  # type: ignore[arg-type]
                        info.size = os.fstat(fh.fileno()).st_size
                        tar.addfile(info, fh)
        return sink.hexdigest()


class _HashingWriter:
    def __init__(self, out: BinaryIO):
        self.out, self.h, self.pos = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.h.update(data)
        self.pos += len(data)
        return self.out.write(data)

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        self.out.flush()

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def _clean(path: str) -> str:
    path = path.strip("/")
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"bad layer path {path!r}")
    return path


# --- the pinned runtime ------------------------------------------------------------------------

_OFFSET = re.compile(rb"tail -c \+(\d+) ")
_IDENT = re.compile(rb"^id=([A-Za-z0-9._-]+)$", re.M)


def runtime_ident(bundle: Path) -> tuple[str, int]:
    """(runtime id, payload offset) from the header of a self-extracting runtime (mur.runtime.bundle)."""
    try:
        with open(bundle, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise MurError("E-DEPLOY-006", f"cannot read the runtime {bundle}: {exc.strerror or exc}") from exc
    off, ident = _OFFSET.search(head), _IDENT.search(head)
    if not off or not ident:
        raise MurError("E-DEPLOY-006", f"{bundle} is not a mur runtime bundle (no self-extracting header)",
                       "pass a runtime built by mur (mur-<version>-<platform>)")
    return ident.group(1).decode(), int(off.group(1)) - 1  # tail -c +N starts at byte N, 1-based


def extract_runtime(bundle: Path, dest: Path) -> str:
    """Unpack the runtime's payload into `dest` as the bundle itself would; returns its id."""
    ident, offset = runtime_ident(bundle)
    try:
        with open(bundle, "rb") as fh:
            fh.seek(offset)
            with tarfile.open(fileobj=fh, mode="r|gz") as tar:
                _unpack(tar, dest)
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise MurError("E-DEPLOY-006", f"cannot unpack the runtime {bundle}: {exc}",
                       "the file is damaged; rebuild or refetch it") from exc
    if not (dest / "mur").is_file():
        raise MurError("E-DEPLOY-006", f"the runtime {bundle} holds no `mur` executable")
    return ident


def _unpack(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract with the checks of tarfile's "data" filter, written out: that filter (and the
    `filter=` argument) arrived in Python 3.11.4, and Debian 12's python3 is 3.11.2.

    Only directories, regular files, symlinks and hard links; every name and link target stays
    inside `dest` (also through links unpacked earlier); files are 0755 or 0644, never setuid.
    """
    dest.mkdir(parents=True, exist_ok=True)
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return path == root or path.startswith(root + os.sep)

    def place(name: str) -> str:
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if not parts or name.startswith("/") or ".." in parts:
            raise tarfile.TarError(f"refusing the member {name!r}: outside the destination")
        path = os.path.join(root, *parts)
        if not inside(os.path.realpath(os.path.dirname(path))):
            raise tarfile.TarError(f"refusing the member {name!r}: its directory leads outside the destination")
        return path

    for member in tar:
        path = place(member.name)
        if member.isdir():
            os.makedirs(path, 0o755, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        if member.issym():
            if os.path.isabs(member.linkname) or not inside(
                    os.path.realpath(os.path.join(os.path.dirname(path), member.linkname))):
                raise tarfile.TarError(f"refusing the symlink {member.name!r} -> {member.linkname!r}: outside the destination")
            os.symlink(member.linkname, path)
        elif member.isfile() or member.islnk():
            mode = 0o755 if member.mode & 0o111 else 0o644
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
            with os.fdopen(fd, "wb") as out:
                if member.isfile():
                    src = tar.extractfile(member)
                    assert src is not None
                    shutil.copyfileobj(src, out, 1 << 20)
                else:  # a hard link to a file unpacked before: a copy (links never leave `dest`)
                    source = os.path.realpath(place(member.linkname))
                    if not inside(source):
                        raise tarfile.TarError(f"refusing the hard link {member.name!r}: outside the destination")
                    with open(source, "rb") as src_fh:
                        shutil.copyfileobj(src_fh, out, 1 << 20)
            os.chmod(path, mode)
        else:
            raise tarfile.TarError(f"refusing the member {member.name!r}: not a file, directory or link")
