"""The tools' view of the host as data: a root built for the session (mount namespace + pivot_root,
as bubblewrap does) holding exactly what the policy grants. Pure, but for ``measure_chain``, the
one measurement it needs; ``mur.sandbox.rootfs`` builds it.

What a tool sees:
* its workdir (the session disk's directory, or the host workdir bound where there is no disk),
  at the same absolute path as on the host, with the runtime's staged ``tools/`` bound read-only
  from the host (the artifacts staged for the session are the runtime's, not the tools' bytes); a
  private ``/tmp`` (on the same disk: it counts toward the ceiling);
* every path Landlock grants, bound read-only at its own path: each allowed binary, its loader and
  libraries (files, not directories), ``interpreter_runtime`` directories, locale data, the TLS
  trust store (with a network grant), the session's logs (read-only); every symbolic link on the
  way to one of them (``/lib64 -> usr/lib64``) is recreated as the same link; the host PATH's
  directories exist (empty but for the granted binaries), so ``/bin/sh`` style names resolve;
* ``/dev`` with ``null``, ``zero``, ``full``, ``random``, ``urandom`` and the ``fd``/``std*``
  links; ``/proc`` of the session's own pid namespace with only its process directories
  (``subset=pid``);
* nothing else: every other path does not exist (ENOENT), so the host's metadata (what exists,
  sizes, owners, times, link targets, extended attributes) is out of reach, not only its contents.

Inside a writable mount (``/tmp``) a granted path needs a read-only skeleton of its own: a tool
could otherwise rename the directories leading to it. A small tmpfs is mounted at the first name
below ``/tmp`` on the way (a mount point cannot be renamed or removed), and made read-only.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Callable, Iterable

DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
DEV_LINKS = (("/dev/fd", "/proc/self/fd"), ("/dev/stdin", "/proc/self/fd/0"), ("/dev/stdout", "/proc/self/fd/1"),
             ("/dev/stderr", "/proc/self/fd/2"))
TMP = "/tmp"
MAX_LINKS = 40  # symbolic links followed for one path, as the kernel's own limit


@dataclass(frozen=True)
class Chain:
    """How a host path resolves: the links met on the way (their own path, their text) and the
    canonical path reached."""

    links: tuple[tuple[str, str], ...]
    real: str
    is_dir: bool


@dataclass(frozen=True)
class Mount:
    """One step of building the root. ``kind``: "dir" (an empty directory), "link" (a symbolic link,
    ``source`` its text), "bind" (the host's ``source`` bound read-only), "device" (a device node
    bound), "work" (the tools' workdir), "staged" (the runtime's tools/ in it, from the host,
    read-only), "tmp" (the private /tmp), "skeleton" (a read-only tmpfs under a writable mount),
    "proc" (the session's procfs)."""

    kind: str
    target: str
    source: str = ""
    is_dir: bool = True
    exec_: bool = False
    reason: str = ""


@dataclass(frozen=True)
class ViewPlan:
    steps: tuple[Mount, ...]
    workdir: str
    tmp: str | None  # "/tmp" when the view has a private one
    notes: tuple[str, ...] = ()


def measure_chain(path: str) -> Chain | None:
    """How ``path`` resolves on this host (lstat and readlink of each component), or None when it
    does not exist or loops. The one measurement the view needs; made before deciding."""
    parts = [p for p in path.split("/") if p]
    links: list[tuple[str, str]] = []
    resolved = "/"
    hops = 0
    while parts:
        name = parts.pop(0)
        if name == ".":
            continue
        if name == "..":
            resolved = os.path.dirname(resolved) or "/"
            continue
        candidate = os.path.join(resolved, name)
        try:
            st = os.lstat(candidate)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_LINKS:
                return None
            try:
                text = os.readlink(candidate)
            except OSError:
                return None
            links.append((candidate, text))
            if text.startswith("/"):
                resolved = "/"
            parts = [p for p in text.split("/") if p] + parts
            continue
        resolved = candidate
    try:
        st = os.stat(resolved)
    except OSError:
        return None
    return Chain(tuple(links), resolved, stat.S_ISDIR(st.st_mode))


def _depth_key(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split("/") if p)


def _under(path: str, root: str) -> bool:
    return path != root and path.startswith(root.rstrip("/") + "/")


def _parents(path: str) -> list[str]:
    out = []
    parent = os.path.dirname(path)
    while parent not in ("/", ""):
        out.append(parent)
        parent = os.path.dirname(parent)
    return out


class _Builder:
    def __init__(self) -> None:
        self.items: dict[str, Mount] = {}
        self.notes: list[str] = []

    def add(self, mount: Mount) -> bool:
        for parent in _parents(mount.target):
            self._put(Mount("dir", parent))
        return self._put(mount)

    def _put(self, mount: Mount) -> bool:
        have = self.items.get(mount.target)
        if have is None or (have.kind == "dir" and mount.kind != "link"):
            self.items[mount.target] = mount
            return True
        if mount.kind == "dir" and have.kind != "link":
            return True  # a mount point is a directory already
        if (have.kind, have.source, have.is_dir) == (mount.kind, mount.source, mount.is_dir):
            if mount.exec_ and not have.exec_:  # one grant needs it executable (a binary's closure)
                self.items[mount.target] = mount
            return True
        self.notes.append(f"{mount.target}: wanted as {mount.kind}, already {have.kind}: left as it is")
        return False

    def chain(self, chain: Chain) -> None:
        for link, text in chain.links:
            self.add(Mount("link", link, text))


BIND_KINDS = {  # Landlock grant reason (its first word) -> (exec on the mount, device)
    "binary": (True, False),
    "interpreter_runtime": (True, False),
    "device": (False, True),
}


STAGED = "tools"  # the runtime's staging in the workdir (mur.session.staging): shown read-only, never on the disk


def plan_view(workdir: str, grants: Iterable[tuple[str, str]], *, chains: Callable[[str], Chain | None],
              path_dirs: Iterable[str] = (), tmp: bool = True, proc: bool = True, devices: bool = True,
              workdir_exec: bool = False, staged: bool = False) -> ViewPlan:
    """The root for one session: ``grants`` are (host path, Landlock reason) pairs to show read-only
    (the workdir's own grant is left out: it is ``workdir``); ``path_dirs`` the PATH entries whose
    directories (and links) should resolve; ``tmp``/``proc``/``devices``: what the view adds;
    ``workdir_exec``: the workdir and /tmp keep exec (filesystem.workdir_exec); ``staged``: the host
    workdir has the runtime's ``tools/`` (bound read-only over the workdir's own)."""
    b = _Builder()
    if proc:
        b.add(Mount("proc", "/proc", reason="the session's processes"))
    if devices:
        b.add(Mount("dir", "/dev"))
        for target, text in DEV_LINKS:
            b.add(Mount("link", target, text))
    device_paths = set(DEVICES if devices else ())
    for path, reason in grants:
        chain = chains(path)
        if chain is None:
            b.notes.append(f"{path}: does not exist on this host; not in the view")
            continue
        exec_, device = BIND_KINDS.get(reason.split(" ", 1)[0], (False, False))
        device_paths.discard(path)
        b.chain(chain)
        b.add(Mount("device" if device else "bind", chain.real, chain.real, chain.is_dir, exec_, reason))
    for path in sorted(device_paths):
        chain = chains(path)
        if chain is not None and not chain.is_dir:
            b.chain(chain)
            b.add(Mount("device", chain.real, chain.real, False, False, "device"))
    for entry in path_dirs:
        chain = chains(entry)
        if chain is not None and chain.is_dir:
            b.chain(chain)
            b.add(Mount("dir", chain.real))
    b.add(Mount("work", workdir, exec_=workdir_exec, reason="workdir"))
    if staged:
        target = f"{workdir.rstrip('/')}/{STAGED}"
        # read-only, and not noexec: a native artifact staged there runs where Landlock grants it execute
        b.add(Mount("staged", target, target, exec_=True, reason="the runtime's staged artifacts (read-only)"))
    has_tmp = tmp and workdir != TMP and not _under(TMP, workdir)
    if has_tmp:
        b.add(Mount("tmp", TMP, exec_=workdir_exec, reason="private /tmp (on the session disk)"))
    return _ordered(b, workdir, TMP if has_tmp else None)


def _ordered(b: _Builder, workdir: str, tmp: str | None) -> ViewPlan:
    items = dict(b.items)
    dir_binds = [t for t, m in items.items() if m.kind == "bind" and m.is_dir]
    for target in list(items):
        if items[target].kind in ("work", "staged"):
            continue
        if any(_under(target, d) for d in dir_binds) or _under(target, workdir):
            where = "the workdir" if _under(target, workdir) else "a directory bound whole"
            if items[target].kind != "dir":
                b.notes.append(f"{target}: inside {where}: visible through it")
            del items[target]
    if _under(workdir, "/") and any(_under(workdir, d) for d in dir_binds):
        b.notes.append(f"{workdir}: the workdir is inside a directory bound read-only")
    if tmp is not None:
        for target in [t for t in items if _under(t, tmp)]:
            first = tmp + "/" + _depth_key(target[len(tmp):])[0]
            if first not in items or items[first].kind == "dir":
                items[first] = Mount("skeleton", first, reason="read-only path inside /tmp")
    steps = tuple(items[t] for t in sorted(items, key=_depth_key))
    return ViewPlan(steps, workdir, tmp, tuple(b.notes))
