"""Let the unprivileged sandbox uid use the workdir when mur runs as root -- without chown.

When mur is root the shell child drops to uid 65534 (RLIMIT_NPROC is not enforced for uid 0, and
root-owned files would be one Landlock bug away). That uid must read and write the session workdir.
We grant it with POSIX ACLs instead of changing ownership, because the workdir may be a directory
the user passed with ``--workdir``: chowning their tree to ``nobody`` would be a lasting surprise.

* every directory in the workdir gets ``user:65534:rwx`` plus the same *default* entry, so files
  and directories created later (by mur as root or by the tool) inherit it;
* every regular file gets ``user:65534:rw-``;
* each ancestor the uid cannot traverse gets ``user:65534:--x`` (search only: no listing, no reads);
  this is what makes absolute paths such as ``HOME=<workdir>/.capsule-home`` usable;
* ``revoke`` strips every such entry again at session end. Files the tool created stay owned by
  65534 (root can still manage them).
* Ancestors are shared by concurrent sessions: ``mur.sandbox.ancestors`` changes their ACLs under a
  host-wide lock, counts the sessions holding an entry, and a session's end removes only its own
  (the last one restores the ancestor exactly).
* ``readonly`` directories (the session's logs, outside the workdir) get ``r-x`` / ``r--`` the same way.

Tools can rename and link inside the workdir while we walk it, so the walk goes through directory
fds (mur.fsafe) and every ACL is set on an fd opened without following a link, checked to be the
entry that was listed: a swap mid-walk makes us skip an entry, never touch a file outside. Files
with more than one link are never touched (one of the names may be outside the workdir).

When the filesystem has no ACL support we fall back to chowning the workdir tree (not the
ancestors) to the sandbox uid, and say so in the log.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from typing import Iterator

from mur.fsafe import DIR_FLAGS, Tree
from mur.sandbox.acl import ACCESS, DEFAULT, GROUP_OBJ, USER, decode, encode, from_mode, get_acl, with_user, without_user
from mur.sandbox.ancestors import STATE_DIR, Ancestors


def _grant_one(fd: int, st: os.stat_result, uid: int, perm: int, directory: bool, default: int = 7) -> None:
    current = get_acl(fd, ACCESS)
    base = decode(current) if current else from_mode(st.st_mode)
    os.setxattr(fd, ACCESS, encode(with_user(base, uid, perm)))
    if directory:
        current = get_acl(fd, DEFAULT)
        base = decode(current) if current else from_mode(st.st_mode)
        os.setxattr(fd, DEFAULT, encode(with_user(base, uid, default)))


def _revoke_one(fd: int, uid: int, directory: bool) -> None:
    for name in (ACCESS, DEFAULT) if directory else (ACCESS,):
        current = get_acl(fd, name)
        if current is None:
            continue
        entries = decode(current)
        if not any(e[0] == USER and e[2] == uid for e in entries):
            continue
        kept = without_user(entries, uid)
        if kept is not None:
            os.setxattr(fd, name, encode(kept))
            continue
        os.removexattr(fd, name)
        if name == ACCESS:  # the mode's group bits showed the mask: give them back to the owning group
            group = next((p for t, p, _ in entries if t == GROUP_OBJ), None)
            if group is not None:
                mode = stat.S_IMODE(os.fstat(fd).st_mode)
                os.fchmod(fd, (mode & ~0o070) | (group << 3))


def _entries(root: str) -> Iterator[tuple[int, os.stat_result, bool]]:
    """(fd, stat, is_dir) for root and every directory and singly linked regular file beneath it,
    each opened through its parent's fd without following a link (a tool may swap entries while
    we walk: what is opened is checked to be what was listed). The fd is valid for one step."""
    with Tree(root) as tree:
        for dirfd, name, st in tree.walk():
            if name == ".":
                yield tree.fd, st, True
                continue
            directory = stat.S_ISDIR(st.st_mode)
            if not directory and not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                continue  # links (symbolic or hard), fifos, sockets: never touched
            if st.st_dev != tree.dev:
                continue  # another filesystem mounted here (the staged tools/, read-only): not ours
            flags = DIR_FLAGS if directory else os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            try:
                fd = os.open(name, flags | os.O_NOFOLLOW, dir_fd=dirfd)
            except OSError:
                continue
            try:
                now = os.fstat(fd)
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    yield fd, now, directory
            finally:
                os.close(fd)


@dataclass
class WorkdirAccess:
    """Grants made for one session, undone by ``revoke``.

    ``readonly``: directories (the session's logs) the uid may read and list but not write.
    """

    workdir: str
    uid: int
    gid: int
    readonly: tuple[str, ...] = ()
    mode: str = "none"  # "acl" | "chown" | "none"
    notes: list[str] = field(default_factory=list)
    state_dir: str = STATE_DIR  # mur.sandbox.ancestors' lock and reference counts
    ancestor_grants: bool = True  # False in a composed root: its directories are the view's own (0755)
    ancestors: Ancestors | None = None

    def grant(self) -> None:
        """Give uid rw on the workdir tree (r on ``readonly``) and search on any ancestor that lacks it."""
        try:
            for fd, st, is_dir in _entries(self.workdir):
                _grant_one(fd, st, self.uid, 7 if is_dir else 6, is_dir)
            for root in self.readonly:
                for fd, st, is_dir in _entries(root):
                    _grant_one(fd, st, self.uid, 5 if is_dir else 4, is_dir, default=5)
            self.mode = "acl"
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
            for fd, _st, _is_dir in _entries(self.workdir):
                os.fchown(fd, self.uid, self.gid)
            self.mode = "chown"
            self.notes.append(f"no POSIX ACL support under {self.workdir}: the workdir tree was chowned to uid {self.uid}")
        if not self.ancestor_grants:
            return
        candidates: list[str] = []
        for root in (self.workdir, *self.readonly):
            parent = os.path.dirname(root)
            while parent and parent != "/" and parent not in candidates:
                candidates.append(parent)
                parent = os.path.dirname(parent)
        self.ancestors = Ancestors(self.uid, state_dir=self.state_dir)
        self.ancestors.grant(candidates, self.notes)

    def revoke(self) -> None:
        """Undo ``grant`` (idempotent): strip the uid's entries (the ancestors' too)."""
        if self.mode == "acl":
            for root in (self.workdir, *self.readonly):
                try:
                    for fd, _st, is_dir in _entries(root):
                        try:
                            _revoke_one(fd, self.uid, is_dir)
                        except OSError:
                            continue
                except OSError:
                    continue
        if self.ancestors is not None:
            self.ancestors.revoke()
        self.mode = "none"
