"""What a component is compiled from: bytes the runtime read and hashed itself, named by their SHA-256.

The engine caches compiled code by the digest of the wasm (mur.wasm.engine), and the runtime may be
root while tools are not. So what is compiled must be exactly what was hashed: a path that a tool
could change between the two reads is never compiled. Two kinds of source:

* a kept source, `<cache>/wasm/<sha256>.wasm`: a copy in the engine's private cache directory (0700,
  ours; the file 0400), written once per content, never per session. A store artifact's payload
  (an entry of its `.mur.zip`) is kept here when it is staged, and the background tier-up
  (mur.wasm.tierup) compiles from here. Its name is its digest: it was hashed before it was written.
* a file elsewhere (a local source, the capsule's own capsule.wasm): read once, hashed, and on a
  cache miss compiled from those same bytes in memory. Its digest is remembered by the file's
  identity (device, inode, size, mtime and ctime, which no unprivileged writer can set back) in
  `<cache root>/wasm-digests` (mur.privatecache), so a warm run neither reads nor hashes it. A
  file changed within the last seconds is not remembered (timestamps are coarse).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from pathlib import Path

KEPT = re.compile(r"[0-9a-f]{64}\.wasm")
DIGESTS_DIR = "wasm-digests"
DIGESTS_KEEP = 512  # remembered files (one small file each); the oldest are dropped
SETTLE_NS = 2_000_000_000  # a file whose ctime is younger than this may still change within one tick


def kept_path(cache_dir: Path, digest: str) -> Path:
    return Path(cache_dir) / f"{digest}.wasm"


def kept_digest(cache_dir: Path, path: Path) -> str | None:
    """The digest of `path` when it is a kept source of `cache_dir` (its name), else None."""
    path = Path(path)
    if path.parent != Path(cache_dir) or not KEPT.fullmatch(path.name):
        return None
    return path.name[:64]


def _trusted_file(path: Path, size: int | None = None) -> bool:
    """A regular file (not a link), ours, that nobody else can write (of `size` bytes when given)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022
            and (size is None or st.st_size == size))


def keep(cache_dir: Path, data: bytes, digest: str | None = None) -> Path:
    """The kept source for `data` in `cache_dir` (a private directory the caller checked),
    written atomically unless a trusted copy is there already; OSError when it cannot be written."""
    from mur.fsafe import write_atomic_at
    from mur.fsutil import mark_used

    digest = digest or hashlib.sha256(data).hexdigest()
    path = kept_path(cache_dir, digest)
    if _trusted_file(path, len(data)):
        mark_used(path)
        return path
    fd = os.open(cache_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        write_atomic_at(fd, path.name, data, mode=0o400, durable=False)  # a cache: lost on a crash, rebuilt
    finally:
        os.close(fd)
    return path


def trusted_kept(cache_dir: Path, digest: str) -> Path | None:
    """The kept source of `digest` when it is there and trusted, else None."""
    path = kept_path(cache_dir, digest)
    return path if _trusted_file(path) else None


# --- digests of files outside the cache ------------------------------------------------------


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _memo_name(path: Path) -> str:
    return hashlib.sha256(os.fsencode(os.path.abspath(path))).hexdigest()[:40] + ".json"


def remembered(path: Path, st: os.stat_result) -> str | None:
    """The digest remembered for the file at `path` with this stat, or None."""
    import json

    from mur import privatecache

    raw = privatecache.read(DIGESTS_DIR, _memo_name(path), 4096)
    if raw is None:
        return None
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("path") != os.path.abspath(path) or entry.get("id") != _identity(st):
        return None
    digest = entry.get("sha256")
    return digest if isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) else None


def remember(path: Path, st: os.stat_result, digest: str) -> None:
    """Remember `digest` for the file at `path` as `st` describes it (unless it changed just now)."""
    import json

    from mur import privatecache

    if time.time_ns() - st.st_ctime_ns < SETTLE_NS:
        return
    entry = {"path": os.path.abspath(path), "id": _identity(st), "sha256": digest}
    privatecache.write(DIGESTS_DIR, _memo_name(path), json.dumps(entry).encode(), keep=DIGESTS_KEEP)


def read_hashed(path: Path) -> tuple[bytes, str, os.stat_result]:
    """(bytes, their sha256, the stat of what was read) of the file at `path`, read once."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        data = fh.read()
    return data, hashlib.sha256(data).hexdigest(), st


def _entry_memo_name(archive_sha256: str, entry: str) -> str:
    return f"zip-{archive_sha256[:48]}-{hashlib.sha256(entry.encode()).hexdigest()[:16]}.json"


def remembered_entry(archive_sha256: str, entry: str) -> str | None:
    """The digest remembered for `entry` of the archive whose bytes hash to `archive_sha256`."""
    import json

    from mur import privatecache

    raw = privatecache.read(DIGESTS_DIR, _entry_memo_name(archive_sha256, entry), 4096)
    try:
        found = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(found, dict) or found.get("archive") != archive_sha256 or found.get("entry") != entry:
        return None
    digest = found.get("sha256")
    return digest if isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) else None


def remember_entry(archive_sha256: str, entry: str, digest: str) -> None:
    """Remember that `entry` of that archive hashes to `digest` (an archive's bytes never change)."""
    import json

    from mur import privatecache

    data = json.dumps({"archive": archive_sha256, "entry": entry, "sha256": digest}).encode()
    privatecache.write(DIGESTS_DIR, _entry_memo_name(archive_sha256, entry), data, keep=DIGESTS_KEEP)
