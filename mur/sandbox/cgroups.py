"""Session cgroups: the aggregate bound (memory, pids, cpu, io) around a shell subprocess tree.

Two layouts, one interface (``SessionCgroup``):

* **v2 / unified** (``/sys/fs/cgroup`` is cgroup2): one directory with ``memory.max``, ``pids.max``,
  ``cpu.max`` and, best-effort, ``io.max``; cleanup through ``cgroup.kill``. As root we create
  ``<mount>/mur/<session>`` (like Docker's cgroupfs driver: a top-level subtree systemd leaves
  alone). Otherwise we follow upstream's delegated path: ask systemd for a transient scope with
  ``Delegate=yes`` (best-effort), then work under our own cgroup, moving ourselves into
  ``<base>/murmur-supervisor`` first when the base holds processes (cgroup v2's "no internal
  processes" rule forbids enabling controllers otherwise).
* **v1 / hybrid / legacy**: one directory per controller at the controller roots,
  ``/sys/fs/cgroup/<ctrl>/mur/<session>``; memory through cgroupspy (``limit_in_bytes``), pids and
  cpu by direct writes (cgroupspy has no pids controller); blkio throttling and the freezer
  (for a race-free kill) when mounted. Never under our own ``/process_api/...`` cgroup as root;
  without root, only inside our own cgroups when they are delegated to our uid (chowned, the v1
  form of ``Delegate=yes``): ``<own cgroup>/mur/<session>``.

The v2 code goes through a tiny filesystem adapter (``CgroupFS``) so unit tests can run it against a
fake cgroupfs; the real v2 path is exercised by the VM integration tests.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

from mur.digits import is_digits

CGROUP_ROOT = "/sys/fs/cgroup"
PARENT = "mur"
CPU_PERIOD_US = 100_000
REQUIRED_V2 = ("memory", "pids", "cpu")


@dataclass(frozen=True)
class CgroupLimits:
    memory_bytes: int
    pids_max: int
    cpu_percent: int
    io_bytes_per_sec: int


class CgroupUnavailable(Exception):
    """No cgroup with the aggregate bound could be created; ``str()`` says why."""


# --- discovery (pure over the text of /proc/self/mounts and /proc/self/cgroup) ----------------


def parse_mounts(text: str) -> list[tuple[str, str, str, list[str]]]:
    """(source, mountpoint, fstype, options) for each line of /proc/self/mounts."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            mountpoint = parts[1].replace("\\040", " ")
            out.append((parts[0], mountpoint, parts[2], parts[3].split(",")))
    return out


def detect_mode(mounts_text: str, root: str = CGROUP_ROOT) -> str:
    """'unified' (pure v2), 'hybrid' (v1 controllers + a v2 mount), 'legacy' (v1 only) or 'none'."""
    mounts = parse_mounts(mounts_text)
    if any(m[1] == root and m[2] == "cgroup2" for m in mounts):
        return "unified"
    v1 = any(m[2] == "cgroup" for m in mounts)
    v2 = any(m[2] == "cgroup2" for m in mounts)
    return "hybrid" if v1 and v2 else "legacy" if v1 else "unified" if v2 else "none"


def v1_controller_roots(mounts_text: str) -> dict[str, str]:
    """Controller name -> mountpoint for every v1 hierarchy (co-mounted ones share a path)."""
    roots: dict[str, str] = {}
    for _src, mountpoint, fstype, options in parse_mounts(mounts_text):
        if fstype != "cgroup":
            continue
        for opt in options:
            if opt in ("memory", "pids", "cpu", "cpuacct", "blkio", "freezer", "cpuset", "devices"):
                roots.setdefault(opt, mountpoint)
    return roots


def v2_mountpoint(mounts_text: str, root: str = CGROUP_ROOT) -> str | None:
    """The cgroup2 mountpoint (``root`` itself when unified)."""
    points = [m[1] for m in parse_mounts(mounts_text) if m[2] == "cgroup2"]
    if root in points:
        return root
    return points[0] if points else None


def delegated_v1_bases(proc_cgroup_text: str, roots: dict[str, str], uid: int,
                       owner: Callable[[str], int] = lambda p: os.stat(p).st_uid) -> dict[str, str] | None:
    """Non-root on v1: controller mountpoint -> the cgroup this process is in, when every required
    one (memory, pids, cpu) is owned by ``uid``, i.e. delegated to it (a supervisor or an init
    system chowned it, the v1 form of ``Delegate=yes``); None otherwise."""
    own: dict[str, str] = {}
    for line in proc_cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1]:
            for ctrl in parts[1].split(","):
                own[ctrl] = parts[2].strip() or "/"
    bases: dict[str, str] = {}
    for ctrl, mountpoint in roots.items():
        path = own.get(ctrl)
        if path is None or path == "/":
            continue
        base = os.path.join(mountpoint, path.lstrip("/"))
        try:
            if owner(base) == uid:
                bases[mountpoint] = base
        except OSError:
            continue
    if any(ctrl not in roots or roots[ctrl] not in bases for ctrl in ("memory", "pids", "cpu")):
        return None
    return bases


def self_v2_path(proc_cgroup_text: str) -> str | None:
    """The ``0::/path`` entry of /proc/self/cgroup."""
    for line in proc_cgroup_text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def block_device(path: str, sys_root: str = "/sys/dev/block") -> str | None:
    """'MAJ:MIN' of the whole disk behind ``path`` (None for tmpfs, overlayfs, NFS...)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    node = os.path.join(sys_root, dev)
    if os.major(st.st_dev) == 0 or not os.path.exists(node):
        return None
    if os.path.exists(os.path.join(node, "partition")):  # throttling applies to the whole disk
        try:
            with open(os.path.join(os.path.realpath(node), "..", "dev")) as fh:
                return fh.read().strip()
        except OSError:
            return None
    return dev


def _flat_keyed(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and is_digits(parts[1].lstrip("-")):
            out[parts[0]] = int(parts[1])
    return out


# --- filesystem adapter -----------------------------------------------------------------------


class CgroupFS:
    """The handful of operations the v2 code performs on cgroupfs (replaced by a fake in tests)."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def mkdir(self, path: str) -> None:
        try:
            os.mkdir(path)
        except FileExistsError:
            pass

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def read(self, path: str) -> str:
        # raw fd, no text wrapper: evidence() reads two of these around every tool call
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks).decode()

    def write(self, path: str, text: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _pids_in(fs: CgroupFS, directory: str) -> set[int]:
    try:
        return {int(x) for x in fs.read(os.path.join(directory, "cgroup.procs")).split()}
    except (OSError, ValueError):
        return set()


def _kill_pids(pids: set[int]) -> None:
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _rmdir_retry(fs: CgroupFS, path: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fs.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            _kill_pids(_pids_in(fs, path))
            time.sleep(0.01)


# --- the session cgroup -----------------------------------------------------------------------


@dataclass
class SessionCgroup:
    """A created cgroup (one dir on v2, one per controller on v1) the children join."""

    version: int  # 1 or 2
    dirs: dict[str, str]  # controller (or "unified") -> directory
    fs: CgroupFS = field(default_factory=CgroupFS)
    parents: list[str] = field(default_factory=list)  # 'mur' dirs we may remove when empty
    notes: list[str] = field(default_factory=list)
    removed: bool = False

    @property
    def procs_files(self) -> list[str]:
        """Every cgroup.procs a child must write its pid into."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def _dir(self, controller: str) -> str | None:
        return self.dirs.get("unified") or self.dirs.get(controller)

    def evidence(self) -> tuple[int, int]:
        """(oom kills, pids.max hits) so far: the kernel's own counters, read before/after a run."""
        oom = hits = 0
        mem = self._dir("memory")
        if mem:
            name = "memory.events" if self.version == 2 else "memory.oom_control"
            try:
                oom = _flat_keyed(self.fs.read(os.path.join(mem, name))).get("oom_kill", 0)
            except OSError:
                pass
        pids = self._dir("pids")
        if pids:
            try:
                hits = _flat_keyed(self.fs.read(os.path.join(pids, "pids.events"))).get("max", 0)
            except OSError:
                pass
        return oom, hits

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs.values():
            out |= _pids_in(self.fs, d)
        return out

    def kill_all(self, timeout: float = 5.0) -> None:
        """SIGKILL every process in the cgroup(s) and wait until they are gone."""
        deadline = time.monotonic() + timeout
        unified = self.dirs.get("unified")
        if unified and self.fs.exists(os.path.join(unified, "cgroup.kill")):
            try:
                self.fs.write(os.path.join(unified, "cgroup.kill"), "1")
            except OSError:
                pass
        freezer = self.dirs.get("freezer")
        frozen = False
        if freezer:  # v1: freeze first so a fork bomb cannot outrun the kill loop
            try:
                self.fs.write(os.path.join(freezer, "freezer.state"), "FROZEN")
                frozen = True
                until = time.monotonic() + 1.0
                while self.fs.read(os.path.join(freezer, "freezer.state")).strip() != "FROZEN":
                    if time.monotonic() > until:
                        break
                    time.sleep(0.005)
            except OSError:
                frozen = False
        while True:
            pids = self.pids()
            if not pids:
                break
            _kill_pids(pids)
            if frozen:  # killed tasks only die once thawed
                try:
                    self.fs.write(os.path.join(freezer, "freezer.state"), "THAWED")
                except OSError:
                    pass
                frozen = False
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
        if frozen:
            try:
                self.fs.write(os.path.join(freezer, "freezer.state"), "THAWED")
            except OSError:
                pass

    def remove(self) -> None:
        """Kill the tree and remove every directory we created (idempotent)."""
        if self.removed:
            return
        self.kill_all()
        errors = []
        for d in self.dirs.values():
            try:
                _rmdir_retry(self.fs, d)
            except OSError as exc:
                errors.append(f"{d}: {exc.strerror}")
        for parent in self.parents:  # shared by concurrent sessions: only goes when empty
            try:
                self.fs.rmdir(parent)
            except OSError:
                pass
        self.removed = not errors
        if errors:
            raise OSError(errno.EBUSY, "could not remove cgroup " + "; ".join(errors))


# --- v1 ---------------------------------------------------------------------------------------


def _mkdir_child(fs: CgroupFS, parent: str, name: str) -> str:
    """mkdir parent/name, re-creating parent when a concurrent session just removed it."""
    path = os.path.join(parent, name)
    for _ in range(5):
        fs.mkdir(parent)
        try:
            fs.mkdir(path)
            return path
        except FileNotFoundError:
            continue
    raise OSError(errno.ENOENT, f"cannot create {path}")


def _v1_memory_limit(mem_root: str, name: str, limit: int) -> str:
    """Create <mem_root>/mur/<name> through cgroupspy and set limit_in_bytes; returns the path."""
    from cgroupspy.nodes import Node

    top = Node(os.path.dirname(mem_root.rstrip("/")).encode() or b"/")
    ctrl = Node(os.path.basename(mem_root.rstrip("/")).encode(), parent=top)
    for _ in range(5):
        parent = ctrl.create_cgroup(PARENT)  # EEXIST is fine for cgroupspy
        try:
            node = parent.create_cgroup(name)
            break
        except FileNotFoundError:  # a concurrent session removed the empty parent
            ctrl.children.clear()
    else:
        raise OSError(errno.ENOENT, f"cannot create {mem_root}/{PARENT}/{name}")
    if node.controller is not None:  # the mount is named "memory": cgroupspy's MemoryController
        node.controller.limit_in_bytes = limit
    else:  # unusual mount name; same file, written directly
        CgroupFS().write(os.path.join(node.full_path.decode(), "memory.limit_in_bytes"), str(limit))
    return node.full_path.decode()


def create_v1(name: str, limits: CgroupLimits, mounts_text: str, workdir_dev: str | None,
              bases: dict[str, str] | None = None) -> SessionCgroup:
    """Per-controller session cgroups on a v1 / hybrid host: under each controller's root as root,
    under the delegated ``bases`` (mountpoint -> our own cgroup there) otherwise."""
    fs = CgroupFS()
    roots = v1_controller_roots(mounts_text)
    missing = [c for c in ("pids", "memory", "cpu") if c not in roots]
    if missing:
        raise CgroupUnavailable(f"cgroup v1 controller(s) {', '.join(missing)} not mounted")
    if bases is not None:  # delegated: our own cgroups, and only controllers delegated to us
        roots = {ctrl: bases[root] for ctrl, root in roots.items() if root in bases}
    cg = SessionCgroup(version=1, dirs={}, fs=fs)
    try:
        cg.dirs["memory"] = _v1_memory_limit(roots["memory"], name, limits.memory_bytes)
        cg.parents.append(os.path.join(roots["memory"], PARENT))
        try:  # no swap accounting on many hosts: the file is then absent
            fs.write(os.path.join(cg.dirs["memory"], "memory.memsw.limit_in_bytes"), str(limits.memory_bytes))
        except OSError:
            pass
        used = {roots["memory"]}
        for ctrl in ("pids", "cpu", "freezer", "blkio"):
            root = roots.get(ctrl)
            if root is None or root in used:
                continue  # absent, or co-mounted with a controller we already have a dir for
            used.add(root)
            parent = os.path.join(root, PARENT)
            cg.dirs[ctrl] = _mkdir_child(fs, parent, name)
            cg.parents.append(parent)
        if "pids" not in cg.dirs or "cpu" not in cg.dirs:
            raise OSError(errno.ENOTSUP, "pids/cpu co-mounted with memory: unsupported layout")
        fs.write(os.path.join(cg.dirs["pids"], "pids.max"), str(limits.pids_max))
        cpu = cg.dirs["cpu"]
        fs.write(os.path.join(cpu, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
        fs.write(os.path.join(cpu, "cpu.cfs_quota_us"), str(limits.cpu_percent * CPU_PERIOD_US // 100))
        blkio = cg.dirs.get("blkio")
        if blkio and workdir_dev:
            try:
                for f in ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"):
                    fs.write(os.path.join(blkio, f), f"{workdir_dev} {limits.io_bytes_per_sec}")
            except OSError as exc:
                cg.notes.append(f"io throttle not applied on {workdir_dev}: {exc.strerror}")
        elif blkio:
            cg.notes.append("io throttle not applied: the workdir's backing device could not be resolved")
    except (OSError, RuntimeError) as exc:
        _discard(cg)
        raise CgroupUnavailable(f"cannot create cgroup v1 session groups: {exc}") from exc
    return cg


def _discard(cg: SessionCgroup) -> None:
    try:
        cg.remove()
    except OSError:
        pass


# --- v2 ---------------------------------------------------------------------------------------


def _controllers(fs: CgroupFS, directory: str, name: str = "cgroup.controllers") -> set[str]:
    try:
        return set(fs.read(os.path.join(directory, name)).split())
    except OSError:
        return set()


def _enable(fs: CgroupFS, directory: str, wanted: list[str]) -> None:
    have = _controllers(fs, directory, "cgroup.subtree_control")
    missing = [c for c in wanted if c not in have]
    if missing:
        fs.write(os.path.join(directory, "cgroup.subtree_control"), " ".join("+" + c for c in missing))


def _v2_limits(fs: CgroupFS, cg: SessionCgroup, path: str, limits: CgroupLimits, workdir_dev: str | None,
               io: bool) -> None:
    fs.write(os.path.join(path, "memory.max"), str(limits.memory_bytes))
    try:
        fs.write(os.path.join(path, "memory.swap.max"), "0")
    except OSError:
        pass  # no swap controller: memory.max alone still bounds RAM
    fs.write(os.path.join(path, "pids.max"), str(limits.pids_max))
    fs.write(os.path.join(path, "cpu.max"), f"{limits.cpu_percent * CPU_PERIOD_US // 100} {CPU_PERIOD_US}")
    if not io:
        cg.notes.append("io.max not applied: the io controller is not available to this cgroup")
    elif not workdir_dev:
        cg.notes.append("io.max not applied: the workdir's backing device could not be resolved")
    else:
        try:
            rate = limits.io_bytes_per_sec
            fs.write(os.path.join(path, "io.max"), f"{workdir_dev} rbps={rate} wbps={rate}")
        except OSError as exc:
            cg.notes.append(f"io.max not applied on {workdir_dev}: {exc.strerror or exc}")


def _create_v2_under(fs: CgroupFS, parent: str, name: str, limits: CgroupLimits, workdir_dev: str | None,
                     parents: list[str]) -> SessionCgroup:
    io = "io" in _controllers(fs, parent, "cgroup.subtree_control")
    path = os.path.join(parent, name)
    fs.mkdir(path)
    cg = SessionCgroup(version=2, dirs={"unified": path}, fs=fs, parents=parents)
    try:
        _v2_limits(fs, cg, path, limits, workdir_dev, io)
    except OSError:
        _discard(cg)
        raise
    return cg


def request_systemd_scope(user: bool, run: Callable[..., object] = subprocess.run) -> bool:
    """Ask systemd for a transient scope with Delegate=yes holding this process (best-effort)."""
    busctl = shutil.which("busctl")
    if not busctl:
        return False
    pid = os.getpid()
    argv = [busctl] + (["--user"] if user else []) + [
        "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager",
        "StartTransientUnit", "ssa(sv)a(sa(sv))", f"mur-{pid}.scope", "fail",
        "2", "PIDs", "au", "1", str(pid), "Delegate", "b", "true", "0",
    ]
    try:
        result = run(argv, capture_output=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return getattr(result, "returncode", 1) == 0


def create_v2(name: str, limits: CgroupLimits, *, mounts_text: str, self_cgroup_text: Callable[[], str],
              is_root: bool, systemd: bool, workdir_dev: str | None, fs: CgroupFS | None = None,
              scope_request: Callable[[bool], bool] = request_systemd_scope) -> SessionCgroup:
    """A v2 session cgroup: under this process's own delegated cgroup when it has one (a systemd unit with
    Delegate=, mur's supervisor subtree), so stopping the service also reaches a session whose `mur run`
    died; else, as root, root-level ``mur/<name>``."""
    fs = fs or CgroupFS()
    mount = v2_mountpoint(mounts_text)
    if mount is None:
        raise CgroupUnavailable("no cgroup2 filesystem is mounted")
    reasons: list[str] = []
    if systemd and not is_root:
        scope_request(True)
        # systemd moves us asynchronously; give it a moment to land in the scope
        until = time.monotonic() + 1.0
        while time.monotonic() < until and not (self_v2_path(self_cgroup_text()) or "").endswith(".scope"):
            time.sleep(0.02)
    rel = self_v2_path(self_cgroup_text())
    base = os.path.normpath(os.path.join(mount, rel.lstrip("/"))) if rel is not None else None
    if base is not None and os.path.basename(base) == "murmur-supervisor":  # moved there by an earlier session
        base = os.path.dirname(base)
    if base is not None and base != mount:
        try:
            return _create_v2_delegated(fs, base, name, limits, workdir_dev)
        except OSError as exc:
            reasons.append(f"delegated {base}: {exc.strerror or exc}")
    if is_root:
        try:
            return _create_v2_root(fs, mount, name, limits, workdir_dev)
        except OSError as exc:
            reasons.append(f"root-level {mount}/{PARENT}: {exc.strerror or exc}")
    if rel is None:
        reasons.append("this process has no cgroup v2 membership")
    raise CgroupUnavailable("; ".join(reasons) or "no delegated cgroup v2 subtree")


def _create_v2_root(fs: CgroupFS, mount: str, name: str, limits: CgroupLimits,
                    workdir_dev: str | None) -> SessionCgroup:
    root_ctrls = _controllers(fs, mount)
    missing = [c for c in REQUIRED_V2 if c not in root_ctrls]
    if missing:
        raise OSError(errno.ENOTSUP, f"controller(s) {', '.join(missing)} not available at {mount}")
    wanted = list(REQUIRED_V2) + (["io"] if "io" in root_ctrls else [])
    _enable(fs, mount, wanted)
    parent = os.path.join(mount, PARENT)
    fs.mkdir(parent)
    _enable(fs, parent, wanted)
    return _create_v2_under(fs, parent, name, limits, workdir_dev, [parent])


def _create_v2_delegated(fs: CgroupFS, base: str, name: str, limits: CgroupLimits,
                         workdir_dev: str | None) -> SessionCgroup:
    ctrls = _controllers(fs, base)
    missing = [c for c in REQUIRED_V2 if c not in ctrls]
    if missing:
        raise OSError(errno.ENOTSUP, f"controller(s) {', '.join(missing)} not delegated to {base}")
    pids = _pids_in(fs, base)
    if pids:
        # v2's "no internal processes" rule: controllers can be enabled for children only once the base
        # holds no process itself, so every process there (not just this one) moves to a leaf.
        supervisor = os.path.join(base, "murmur-supervisor")
        fs.mkdir(supervisor)
        for pid in sorted(pids):
            try:
                fs.write(os.path.join(supervisor, "cgroup.procs"), str(pid))
            except ProcessLookupError:
                continue  # exited meanwhile
    wanted = list(REQUIRED_V2) + (["io"] if "io" in ctrls else [])
    _enable(fs, base, wanted)
    return _create_v2_under(fs, base, f"murmur-{name}", limits, workdir_dev, [])


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def create_session_cgroup(name: str, limits: CgroupLimits, *, workdir: str | None = None,
                          mode: str | None = None) -> SessionCgroup:
    """Create the session's cgroup(s) on this host; raises CgroupUnavailable with the reason."""
    mounts_text = _read("/proc/self/mounts")
    mode = mode or detect_mode(mounts_text)
    workdir_dev = block_device(workdir) if workdir else None
    if mode == "unified":
        return create_v2(
            name, limits, mounts_text=mounts_text, self_cgroup_text=lambda: _read("/proc/self/cgroup"),
            is_root=os.geteuid() == 0, systemd=os.path.isdir("/run/systemd/system"), workdir_dev=workdir_dev,
        )
    if mode in ("hybrid", "legacy"):
        bases = None
        if os.geteuid() != 0:
            bases = delegated_v1_bases(_read("/proc/self/cgroup"), v1_controller_roots(mounts_text), os.geteuid())
            if bases is None:
                raise CgroupUnavailable(f"cgroup v1 ({mode}) hierarchies can only be managed as root, or inside "
                                        f"memory, pids and cpu cgroups delegated to uid {os.geteuid()}")
        return create_v1(name, limits, mounts_text, workdir_dev, bases)
    raise CgroupUnavailable("no cgroup filesystem is mounted")
