"""A deployment's session records, read where the deployment runs: read-only, no link followed.

Where they are: each release keeps its sessions beside its tools' workdir (mur.deploy.steps):

    <home>/.murmur/deployments/<id>/releases/<n>/workdir/ses_<32 hex>/trace.jsonl

and the release's prestart script keeps the newest `--keep-sessions` of them. Session ids sort by
creation, so the list is ordered by id across releases.

How they are read, never written:
* an SSH deployment: SFTP over a new SSH connection to the recorded target, host key verified as
  deploy verified it (mur.deploy.targets.connect). Every component from `releases/` down is
  lstat-ed and must be a directory (the trace: a regular file); a symbolic link anywhere is
  skipped or refused. SFTP has no O_NOFOLLOW, so the open itself resolves the path: the window
  between the lstat and the open matters only to whoever can write the session directory, and
  that is the runtime alone (tools write `work/`; Landlock gives them S/logs read-only at most).
* a deployment on this machine: mur.fsafe.Tree (openat2 beneath `releases/`, no symlink, a
  regular file with one link).

Directories owned by a session uid are not sessions (a tool running as one could only have made
them; mur.trace.sessions applies the same rule). A trace is read up to mur.jsonl.MAX_BYTES
(E-IO-003 beyond), as a local one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from mur.deploy.state import Deployment
from mur.deploy.steps import Layout
from mur.digits import is_digits
from mur.errors import MurError
from mur.ids import SESSION_UID_RANGES
from mur.jsonl import MAX_BYTES
from mur.trace.sessions import MIN_SUFFIX, SESSION_ID, TRACE_FILE

SESSIONS_DIR = "workdir"  # beside the release's tools' workdir (mur.deploy.runline.TOOLS_WORKDIR)


@dataclass(frozen=True)
class SessionRef:
    session_id: str
    release: int
    rel: str  # the trace, relative to the deployment's releases/ directory

    @property
    def directory(self) -> str:
        return os.path.dirname(self.rel)


class Sessions(Protocol):
    where: str  # the releases directory as a person locates it (user@host:path)

    def list(self) -> list[SessionRef]:
        """The deployment's sessions that have a trace, oldest first."""

    def size(self, ref: SessionRef) -> int:
        """The trace's size now (0 when it is gone)."""

    def read(self, ref: SessionRef, offset: int = 0, limit: int = MAX_BYTES) -> bytes:
        """At most `limit` bytes of the trace from `offset`."""

    def close(self) -> None: ...


def _session_uid(uid: int | None) -> bool:
    return uid is not None and any(lo <= uid <= hi for lo, hi in SESSION_UID_RANGES)


def _release_numbers(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if is_digits(n))


class SftpSessions:
    """The sessions of a deployment on an SSH host, through the connection's SFTP channel."""

    def __init__(self, sftp: Any, releases: str, label: str):
        self.sftp, self.releases = sftp, releases.rstrip("/")
        self.where = f"{label}:{self.releases}"

    def _lstat(self, path: str) -> Any | None:
        try:
            return self.sftp.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise

    def _dirs(self, path: str) -> list[Any]:
        """The real directories in `path` (no links), as SFTP attributes with `filename`."""
        try:
            entries = self.sftp.listdir_attr(path)
        except (FileNotFoundError, PermissionError):
            return []
        return [e for e in entries if e.st_mode is not None and stat.S_ISDIR(e.st_mode)]

    def list(self) -> list[SessionRef]:
        top = self._lstat(self.releases)
        if top is None or not stat.S_ISDIR(top.st_mode or 0):
            return []
        found: list[SessionRef] = []
        for n in _release_numbers([e.filename for e in self._dirs(self.releases)]):
            base = f"{self.releases}/{n}/{SESSIONS_DIR}"
            st = self._lstat(base)
            if st is None or not stat.S_ISDIR(st.st_mode or 0):  # absent, or a link: not followed
                continue
            for entry in self._dirs(base):
                name = entry.filename.lower()
                if not SESSION_ID.fullmatch(name) or _session_uid(entry.st_uid):
                    continue
                trace = self._lstat(f"{base}/{entry.filename}/{TRACE_FILE}")
                if trace is not None and stat.S_ISREG(trace.st_mode or 0):
                    found.append(SessionRef(name, n, f"{n}/{SESSIONS_DIR}/{entry.filename}/{TRACE_FILE}"))
        return sorted(found, key=lambda r: r.session_id)

    def _checked(self, ref: SessionRef) -> str:
        path = f"{self.releases}/{ref.rel}"
        parts = ref.rel.split("/")
        for i in range(1, len(parts) + 1):  # every component, not only the last: no link on the way
            st = self._lstat(f"{self.releases}/{'/'.join(parts[:i])}")
            want = stat.S_ISREG if i == len(parts) else stat.S_ISDIR
            if st is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            if not want(st.st_mode or 0):
                raise OSError(errno.ELOOP, "not a plain directory or file (a link?)", path)
        return path

    def size(self, ref: SessionRef) -> int:
        st = self._lstat(f"{self.releases}/{ref.rel}")
        return int(st.st_size or 0) if st is not None and stat.S_ISREG(st.st_mode or 0) else 0

    def read(self, ref: SessionRef, offset: int = 0, limit: int = MAX_BYTES) -> bytes:
        path = self._checked(ref)
        with self.sftp.open(path, "rb") as fh:
            st = fh.stat()
            if not stat.S_ISREG(st.st_mode or 0):
                raise OSError(errno.ELOOP, "not a regular file", path)
            size = int(st.st_size or 0)
            if offset >= size:
                return b""
            want = min(size - offset, limit)
            fh.seek(offset)
            fh.prefetch(offset + want)
            return fh.read(want)

    def close(self) -> None:
        pass  # the SFTP channel closes with its connection


class LocalSessions:
    """The sessions of a deployment on this machine (mur.fsafe: nothing a tool linked is followed)."""

    def __init__(self, releases: str):
        self.releases = releases.rstrip("/")
        self.where = self.releases

    def _tree(self):  # noqa: ANN202 - mur.fsafe.Tree
        from mur.fsafe import Tree

        return Tree(self.releases)

    def list(self) -> list[SessionRef]:
        from mur.fsafe import DIR_FLAGS

        try:
            tree = self._tree()
        except OSError:
            return []
        found: list[SessionRef] = []
        with tree:
            for n in _release_numbers(_real_dirs(tree, ".", DIR_FLAGS)):
                rel = f"{n}/{SESSIONS_DIR}"
                for name in _real_dirs(tree, rel, DIR_FLAGS, skip_uid=_session_uid):
                    if not SESSION_ID.fullmatch(name.lower()):
                        continue
                    st = tree.lstat(f"{rel}/{name}/{TRACE_FILE}")
                    if st is not None and stat.S_ISREG(st.st_mode):
                        found.append(SessionRef(name.lower(), n, f"{rel}/{name}/{TRACE_FILE}"))
        return sorted(found, key=lambda r: r.session_id)

    def size(self, ref: SessionRef) -> int:
        try:
            with self._tree() as tree:
                st = tree.lstat(ref.rel)
        except OSError:
            return 0
        return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else 0

    def read(self, ref: SessionRef, offset: int = 0, limit: int = MAX_BYTES) -> bytes:
        from mur.fsafe import check_single

        with self._tree() as tree:
            fd = tree.open(ref.rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            check_single(fd, ref.rel)
            os.set_blocking(fd, True)
            chunks, total = [], 0
            while total < limit:
                chunk = os.pread(fd, min(1 << 20, limit - total), offset + total)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def close(self) -> None:
        pass


def _real_dirs(tree: Any, rel: str, flags: int, skip_uid: Callable[[int], bool] = lambda _u: False) -> list[str]:
    """Names of the real directories (no links) in `rel` beneath `tree`; [] when it is not one."""
    try:
        fd = tree.open(rel, flags)
    except OSError:
        return []
    try:
        out = []
        for name in os.listdir(fd):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and not skip_uid(st.st_uid):
                out.append(name)
        return out
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_sessions(dep: Deployment, note: Callable[[str], None] = lambda _t: None,
                  connect: Callable[..., Any] | None = None) -> Iterator[Sessions]:
    """The deployment's sessions, read where it runs, for the block (the SSH connection, when one
    is needed, is opened here and closed when the block ends)."""
    if not dep.home:
        raise MurError("E-DEPLOY-008", f"deployment {dep.deployment_id} has no recorded home directory",
                       "deploy it again with this version of mur")
    releases = Layout(dep.home, dep.deployment_id).releases
    if dep.provider == "local":
        yield LocalSessions(releases)
        return
    if dep.provider != "ssh":
        raise MurError("E-TRC-002", f"deployment {dep.deployment_id} runs on {dep.provider}: its sessions are read "
                       "only for SSH and local deployments", "read them inside the container (mur trace show there)")
    if connect is None:
        from mur.deploy.targets import connect as connect_target

        connect = connect_target
    from mur.remote.reach import CONNECT_BUDGET

    target = connect(dep.target, note=note, connect_budget=CONNECT_BUDGET)
    try:
        yield SftpSessions(target.sftp(), releases, target.label)
    finally:
        target.close()


def pick(address: str | None, refs: list[SessionRef], where: str) -> SessionRef:
    """The session an address names among `refs` (oldest first): a full id, a 4+ character suffix,
    or @N (the N-th most recent); E-TRC-002 when none or several match (as mur.trace.sessions)."""
    text = (address or "@1").strip()
    lowered = text.lower()
    if text.startswith("@"):
        n = int(text[1:]) if is_digits(text[1:]) else 0
        if n < 1:
            raise MurError("E-TRC-002", f"bad session address '{text}': @N counts from @1 (the most recent)",
                       "@1 is the last session, @2 the one before")
        if n > len(refs):
            raise MurError("E-TRC-002", f"session address '{text}' matched no session: {where} holds "
                           f"{len(refs)} session(s)", _hint(refs))
        return refs[-n]
    if "/" in text:
        raise MurError("E-TRC-002", f"'{text}' is a path: with --deployment give a session id, a suffix or @N",
                       _hint(refs))
    if SESSION_ID.fullmatch(lowered):
        hits = [r for r in refs if r.session_id == lowered]
    elif len(text) < MIN_SUFFIX:
        raise MurError("E-TRC-002", f"session address '{text}' is too short: a suffix needs at least "
                       f"{MIN_SUFFIX} characters", "use a full session id, a longer suffix, or @N")
    else:
        hits = [r for r in refs if r.session_id.endswith(lowered)]
    if not hits:
        raise MurError("E-TRC-002", f"session address '{text}' matched no session in {where}", _hint(refs))
    if len(hits) > 1:
        raise MurError("E-TRC-002", f"session address '{text}' matched {len(hits)} sessions: "
                       + ", ".join(r.session_id for r in hits), "use a longer suffix or the full session id")
    return hits[0]


def _hint(refs: list[SessionRef]) -> str:
    if not refs:
        return "the deployment has served no session yet (or its sessions were pruned: --keep-sessions)"
    newest = ", ".join(r.session_id for r in refs[-3:][::-1])
    return f"its most recent: {newest}"
