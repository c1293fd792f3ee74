"""The session's private namespaces, built once per session by a holder child, joined by each tool.

What a session gets (``policy.plan_namespaces`` decides, this module applies):

* **net** -- only loopback, brought up; the egress proxy's listening socket is created in it (and
  handed to mur, which serves it from its own namespace), so the proxy is the one way out.
  Abstract unix sockets are per network namespace too, so the host's are out of reach.
* **ipc** -- System V IPC objects and POSIX message queues of its own.
* **mnt** -- where the probe verified it can (``sealed``): a root built for the session
  (``rootfs.py`` applies ``viewplan.ViewPlan``): the workdir on the session disk (``disk.py``), a
  private /tmp, /dev, the session's /proc and the granted paths read-only, nothing else. The
  runtime reaches the tools' workdir through that root (``SessionNamespaces.live_root``):
  ``/proc/<holder>/root<workdir>`` while a pid namespace keeps the holder, else through its own fd
  of the root (``/proc/<mur>/fd/<n><workdir>``), taken before the holder left; the disk's fds come
  back to it. Otherwise the fallback:
  a read-only view of the whole tree except the workdir: Landlock does not mediate
  chmod, chown, utime(s) or setxattr, so without it a tool could change the mode, owner, times or
  extended attributes of any file its uid owns outside the workdir (as non-root: mur's own session
  record, ~/.murmur, the user's home). ``mount_setattr(2)`` (Linux 5.12+) sets MOUNT_ATTR_RDONLY
  on every mount (AT_RECURSIVE) and clears it again on the workdir's own bind mount, so all of
  those answer EROFS. Older kernels keep the writable view (``SessionNamespaces.view`` says why).
  Unless ``filesystem.workdir_exec``, the workdir's bind mount is also ``noexec,nosuid,nodev``:
  the ELF loader cannot map a binary copied into it (Landlock's execute right covers execve only).
* **user** (mur not root) -- an unprivileged user namespace mapping only mur's own uid and gid to
  themselves; it is what lets a non-root mur create the others. Tools gain no privilege from it:
  their uid inside is not 0, so execve clears the capabilities joining gave them.
* **pid** -- kill, setpriority, prlimit, sched_setaffinity, ioprio_set, pidfd_open ... can only
  name processes of the session: not mur's (which tools share the uid of when mur is not root),
  not the session's spawner (zygote.py, which shares the tools' uid). Its pid 1 is a reaper forked
  by the holder; both live until ``close()``, or die with mur (PR_SET_PDEATHSIG), and every
  process of the namespace with them.

The holder sends back nsfs fds (and the listener, and the disk's fds) over a socketpair; nsfs fds
keep a namespace alive with no process in it, so the session's spawner only calls setns(). Creating a namespace costs
milliseconds (netns teardown even more, asynchronously): once per session, never per call.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
from dataclasses import dataclass, field

from mur.sandbox.diskplan import DiskPlan
from mur.sandbox.viewplan import ViewPlan

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x00020000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
FLAGS = {"user": CLONE_NEWUSER, "net": CLONE_NEWNET, "ipc": CLONE_NEWIPC, "mnt": CLONE_NEWNS, "pid": CLONE_NEWPID}
# /proc/self/ns entry per namespace: the pid namespace the holder created is its pid_for_children.
NS_FILES = {"user": "user", "net": "net", "ipc": "ipc", "mnt": "mnt", "pid": "pid_for_children"}
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 32, 4096, 16384, 1 << 18
MS_RDONLY, MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1, 1024, 2048, 1 << 21
# statvfs f_flag bits -> mount flags a remount inside a user namespace must keep (they are locked)
ST_TO_MS = ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC), (1024, MS_NOATIME),
            (2048, MS_NODIRATIME), (4096, MS_RELATIME))
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# mount_setattr(2): 442 in the unified syscall table every architecture shares since 5.1
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 0x1
HANDOVER_TIMEOUT = 10.0
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
_libc = ctypes.CDLL(None, use_errno=True)


def _ccheck(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _map_own_ids(uid: int, gid: int) -> None:
    _write("/proc/self/setgroups", "deny")  # required before an unprivileged gid_map
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: str, flags: int, *, set_: int = 0, clear: int = 0) -> None:
    attr = _MountAttr(set_, clear, 0, 0)
    result = _libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), os.fsencode(path),
                           ctypes.c_uint(flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    _ccheck(result, f"mount_setattr({path})")


def _mount_view(workdir: str, noexec: bool) -> str:
    """The tools' mount view: the workdir on a bind mount of its own (noexec unless told otherwise),
    everything else read-only. Returns "read-only" or why the rest of the tree stays writable."""
    path_b = os.fsencode(workdir)
    _ccheck(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount(/, MS_PRIVATE)")
    _ccheck(_libc.mount(path_b, path_b, None, MS_BIND | MS_REC, None), "bind mount of the workdir")
    st = os.statvfs(workdir)
    if noexec:
        kept = 0
        for st_bit, ms_bit in ST_TO_MS:
            if st.f_flag & st_bit:
                kept |= ms_bit
        _ccheck(_libc.mount(None, path_b, None, MS_REMOUNT | MS_BIND | MS_NOEXEC | MS_NOSUID | MS_NODEV | kept,
                            None), "remount of the workdir noexec")
    try:
        _mount_setattr("/", AT_RECURSIVE, set_=MOUNT_ATTR_RDONLY)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL):  # before Linux 5.12
            return f"mount_setattr is not available ({os.strerror(exc.errno)})"
        raise
    if not st.f_flag & os.ST_RDONLY:
        # only the workdir's own mount: one it contains stays read-only, and one that was read-only
        # on the host is never made writable (its lock would refuse that in a user namespace anyway)
        _mount_setattr(workdir, 0, clear=MOUNT_ATTR_RDONLY)
    return "read-only"


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack_from("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _listener(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def _reaper() -> None:
    """pid 1 of the session's pid namespace: reap every orphan until killed at close()."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        signal.sigwaitinfo({signal.SIGCHLD})  # stays pending while blocked: no lost wakeup


@dataclass
class HolderSpec:
    """What the holder builds: the namespaces, and in the mount namespace either the composed root
    (``view``, with the session ``disk`` when it is kernel-counted) or the read-only host view."""

    names: tuple[str, ...]
    workdir: str | None = None
    proxy_port: int | None = None
    noexec: bool = True
    view: ViewPlan | None = None
    disk: DiskPlan | None = None
    image_fd: int | None = None  # ext4-loop: the formatted image, opened by mur
    host_tmp: str | None = None  # the private /tmp's host directory when there is no session disk


def _compose(spec: HolderSpec) -> list[int]:
    """The composed root, up to (not including) the final pivot; returns the disk's (root, work) fds."""
    from mur.sandbox import disk, rootfs

    assert spec.view is not None and spec.workdir is not None
    rootfs.enter_scratch()
    held: list[int] = []
    if spec.disk is not None and spec.disk.kernel:
        try:
            disk.mount_disk(spec.disk, rootfs.DISK, spec.image_fd, owner=None)
        except OSError as exc:
            raise _Failed("disk", f"mounting the session disk ({spec.disk.mechanism}): {exc}") from None
        held = [os.open(rootfs.DISK, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC),
                os.open(f"{rootfs.DISK}/{disk.WORK}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        sources = rootfs.Sources(f"{rootfs.DISK}/{disk.WORK}", f"{rootfs.DISK}/{disk.TMP}")
    else:
        sources = rootfs.Sources(rootfs.OLD + spec.workdir, rootfs.OLD + spec.host_tmp if spec.host_tmp else None)
    rootfs.build(spec.view, sources)
    return held


class _Failed(Exception):
    """A step of the holder failed; ``what`` is the part of the plan it belongs to (view, disk, ...)."""

    def __init__(self, what: str, message: str) -> None:
        super().__init__(message)
        self.what = what


def _holder(spec: HolderSpec, chan: socket.socket, uid: int, gid: int) -> None:
    """The forked child: create the namespaces, hand their fds over, then hold them until mur closes
    the channel (or dies)."""
    names = spec.names
    step, part = "unshare", "namespaces"
    try:
        flags = 0
        for name in names:
            flags |= FLAGS[name]
        _ccheck(_libc.unshare(flags), f"unshare({'+'.join(names)})")
        if "user" in names:
            step = "mapping the user namespace"
            _map_own_ids(uid, gid)
        view = "no mount namespace"
        held: list[int] = []
        composed = "mnt" in names and spec.view is not None
        if composed:
            step, part = "building the tools' root", "view"
            held = _compose(spec)
            view = "composed-root"
        elif "mnt" in names and spec.workdir is not None:
            step, part = "making the read-only mount view", "mnt"
            view = _mount_view(spec.workdir, spec.noexec)
        listener = None
        part = "namespaces"
        if "net" in names:
            step = "bringing up loopback"
            _loopback_up()
            if spec.proxy_port is not None:
                step = f"listening on 127.0.0.1:{spec.proxy_port}"
                listener = _listener(spec.proxy_port)
        init_pid = 0
        if "pid" in names:  # first: pid_for_children only resolves once the namespace has its init
            step = "starting the pid namespace's init"
            init_pid = _start_init(chan, listener, composed)
        step = "opening the namespace files"  # before the final pivot: the tools' /proc has no self for us
        proc = "/oldroot/proc" if composed else "/proc"  # the host's, under the scratch root
        fds = [os.open(f"{proc}/self/ns/{NS_FILES[n]}", os.O_RDONLY | os.O_CLOEXEC) for n in names]
        if composed:
            step, part = "entering the tools' root", "view"
            from mur.sandbox import rootfs

            rootfs.finish(spec.view)  # type: ignore[arg-type]
        part = "namespaces"
        payload = fds + ([listener.fileno()] if listener is not None else []) + held
        header = b"ok %d %d %d %s" % (init_pid, 1 if listener is not None else 0, len(held),
                                      view.encode(errors="replace")[:400])
        socket.send_fds(chan, [header], payload)
        chan.recv(1)  # the parent holds its own copies now
        for fd in payload:
            os.close(fd)
        chan.recv(1)  # until mur closes the channel (close()) or dies: the live path needs this process
        if init_pid:
            os.kill(init_pid, signal.SIGKILL)
            os.waitpid(init_pid, 0)
    except BaseException as exc:
        if isinstance(exc, _Failed):
            part = exc.what
        try:
            chan.sendall(f"err {part} {step}: {exc}".encode(errors="replace")[:500])
        except OSError:
            pass


def _start_init(chan: socket.socket, listener: socket.socket | None, composed: bool) -> int:
    """Fork the pid namespace's init; in a composed root it mounts the session's /proc first."""
    ready_r, ready_w = os.pipe()
    init_pid = os.fork()
    if init_pid == 0:
        _die_with(None)  # its parent is outside its namespace: getppid() is 0 here
        _ccheck(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")  # its memory is mur's
        chan.close()
        if listener is not None:
            listener.close()
        os.close(ready_r)
        answer = b"k"
        if composed:
            from mur.sandbox import rootfs

            try:
                rootfs.mount_proc()
            except OSError as exc:
                answer = f"mounting the session's /proc: {exc}".encode()[:300]
        os.write(ready_w, answer)
        os.close(ready_w)
        _reaper()
    os.close(ready_w)
    answer = os.read(ready_r, 400)
    os.close(ready_r)
    if answer != b"k":
        os.kill(init_pid, signal.SIGKILL)
        os.waitpid(init_pid, 0)
        raise _Failed("view", answer.decode(errors="replace") or "the pid namespace's init died")
    return init_pid


@dataclass
class SessionNamespaces:
    """The nsfs fds a tool joins, the proxy listener bound inside, the holder keeping them (and the
    composed root) alive, and the session disk's fds when it has one."""

    names: tuple[str, ...]
    fds: dict[str, int] = field(default_factory=dict)
    listener: socket.socket | None = None
    holder_pid: int | None = None
    init_pidfd: int | None = None
    view: str = "no mount namespace"  # "composed-root", "read-only" (all but the workdir), else why writable
    disk_fds: tuple[int, int] | None = None  # (the disk's root, its work/), owned by the caller once taken
    chan: socket.socket | None = None
    root_fd: int | None = None  # the composed root, held here once a holder with nothing else to do left

    @property
    def live_root(self) -> str | None:
        """The tools' root as the runtime reaches it (a composed root only): ``/proc/<holder>/root``
        while a holder lives, else our own fd of it (``/proc/<mur>/fd/<n>``; a path walk through
        either enters that root and its mounts, whatever namespace walks it)."""
        if self.view != "composed-root":
            return None
        if self.root_fd is not None:
            return f"/proc/{os.getpid()}/fd/{self.root_fd}"
        return f"/proc/{self.holder_pid}/root" if self.holder_pid else None

    def join_order(self) -> list[tuple[int, int]]:
        """(fd, CLONE_NEW*) in the order a tool must setns() them: user first, pid last."""
        return [(self.fds[n], FLAGS[n]) for n in self.names]

    def take_disk(self) -> tuple[int, int] | None:
        held, self.disk_fds = self.disk_fds, None
        return held

    def close(self) -> None:
        """Kill the pid namespace's init (every process in it dies with it), release the holder."""
        self.release()
        self.reap()

    def reap(self) -> None:
        """Wait for the released holder to be gone (its exit runs meanwhile: `release` first, other
        teardown, then this)."""
        if self.holder_pid is not None:
            try:
                os.waitpid(self.holder_pid, 0)
            except ChildProcessError:
                pass
            self.holder_pid = None

    def release(self) -> None:
        """Kill the pid namespace's init and let the holder go (it exits once its channel closes);
        close every fd of ours. `reap` waits for it."""
        if self.init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
            except OSError:
                pass
            os.close(self.init_pidfd)
            self.init_pidfd = None
        if self.chan is not None:
            self.chan.close()
            self.chan = None
        for fd in list(self.fds.values()) + list(self.disk_fds or ()) + ([self.root_fd] if self.root_fd is not None else []):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}
        self.disk_fds = None
        self.root_fd = None
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def _die_with(parent: int | None) -> None:
    """SIGKILL this process when its parent dies: a mur killed with -9 leaves no holder or init
    behind. ``parent``: the pid to check for a death before the prctl took effect, where visible."""
    _ccheck(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if parent is not None and os.getppid() != parent:
        os._exit(0)


def _close_inherited(keep: int, also: int | None = None) -> None:
    """The holder outlives this call: it must not pin mur's sockets, pipes and files open (its
    stdio included: a caller reading mur's output would wait for the holder too)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in (keep, also):
            try:
                os.close(fd)
            except OSError:
                pass


class HolderFailed(OSError):
    """The holder could not build part of the plan; ``part`` is "view", "disk", "mnt" or "namespaces"."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part


def create(names: tuple[str, ...], *, workdir: str | None = None, proxy_port: int | None = None,
           noexec: bool = True, view: ViewPlan | None = None, disk: DiskPlan | None = None,
           image_fd: int | None = None, host_tmp: str | None = None) -> SessionNamespaces:
    """Build ``names`` (NAMESPACES order) in a holder child; raises HolderFailed naming the failed
    part and step. With mnt and a ``view``: the composed root (and the session ``disk`` in it);
    with mnt and a workdir only: the read-only view, the workdir writable (and noexec if ``noexec``)."""
    spec = HolderSpec(names, workdir, proxy_port, noexec, view, disk, image_fd, host_tmp)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    uid, gid = os.getuid(), os.getgid()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            _die_with(parent)  # with the thread that forked it, in fact: create() on a session's own thread
            ours.close()
            _close_inherited(theirs.fileno(), image_fd)
            _holder(spec, theirs, uid, gid)
        finally:
            os._exit(0)
    theirs.close()
    made = SessionNamespaces(names, holder_pid=pid, chan=ours)
    try:
        ours.settimeout(HANDOVER_TIMEOUT)
        want = len(names) + (1 if proxy_port is not None and "net" in names else 0) + 2
        msg, fds, _flags, _addr = socket.recv_fds(ours, 1024, want)
        if not msg.startswith(b"ok "):
            for fd in fds:
                os.close(fd)
            part, detail = "namespaces", "the holder exited"
            if msg.startswith(b"err "):
                part, _, detail = msg[4:].decode(errors="replace").partition(" ")
            raise HolderFailed(part, f"cannot create the session namespaces ({'+'.join(names)}): {detail}")
        for fd in fds:
            os.set_inheritable(fd, False)
        _ok, init_field, listening, held, *view_text = msg.decode(errors="replace").split(" ", 4)
        made.fds = dict(zip(names, fds))
        rest = fds[len(names):]
        if listening == "1":
            made.listener = socket.socket(fileno=rest.pop(0))
        if int(held) == 2 and len(rest) >= 2:
            made.disk_fds = (rest[0], rest[1])
        made.view = view_text[0] if view_text else made.view
        init_pid = int(init_field)
        if init_pid:
            made.init_pidfd = os.pidfd_open(init_pid)
        elif made.view == "composed-root":  # no holder is kept (below): our own fd of its root
            try:
                made.root_fd = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                raise HolderFailed("view", f"cannot hold the tools' root: {exc}") from exc
        ours.sendall(b"k")
        ours.settimeout(None)
    except BaseException:
        made.close()
        raise
    if made.init_pidfd is None:
        # nothing to hold without a pid namespace: the nsfs fds keep the namespaces alive, and a
        # composed root is reached through our own fd of it. A holder that stayed (a session disk's,
        # for as long as a service idles) cost ~6 MB of pages its Python code had dirtied, and a process.
        if made.chan is not None:
            made.chan.close()
            made.chan = None
        os.waitpid(pid, 0)
        made.holder_pid = None
    return made


def available(names: tuple[str, ...]) -> bool:
    """Can this process create ``names`` (measured by creating and discarding them)?"""
    try:
        create(names).close()
        return True
    except OSError:
        return False
