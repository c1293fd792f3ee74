"""The session's private namespaces, built once per session by a holder child, joined by each tool.

What a session gets (``policy.plan_namespaces`` decides, this module applies):

* **net** -- only loopback, brought up; the egress proxy's listening socket is created in it (and
  handed to mur, which serves it from its own namespace), so the proxy is the one way out.
  Abstract unix sockets are per network namespace too, so the host's are out of reach.
* **ipc** -- System V IPC objects and POSIX message queues of its own.
* **mnt** -- the workdir bind-mounted onto itself ``noexec,nosuid,nodev``: the ELF loader cannot
  map a binary copied into it (Landlock's execute right covers execve only).
* **user** (mur not root) -- an unprivileged user namespace mapping only mur's own uid and gid to
  themselves; it is what lets a non-root mur create the others. Tools gain no privilege from it:
  their uid inside is not 0, so execve clears the capabilities joining gave them.
* **pid** (mur not root) -- tools then share mur's uid, so they get a pid namespace instead: kill,
  setpriority, prlimit, sched_setaffinity, ioprio_set, pidfd_open ... can only name processes of
  the session. Its pid 1 is a reaper forked by the holder; both live until ``close()``.

The holder sends back nsfs fds (and the listener) over a socketpair; nsfs fds keep a namespace
alive with no process in it, so a tool's preexec only calls setns(). Creating a namespace costs
milliseconds (netns teardown even more, asynchronously): once per session, never per call.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
from dataclasses import dataclass, field

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
HANDOVER_TIMEOUT = 10.0
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


def _noexec_workdir(path: str) -> None:
    path_b = os.fsencode(path)
    _ccheck(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount(/, MS_PRIVATE)")
    _ccheck(_libc.mount(path_b, path_b, None, MS_BIND | MS_REC, None), "bind mount of the workdir")
    kept = 0
    st = os.statvfs(path)
    for st_bit, ms_bit in ST_TO_MS:
        if st.f_flag & st_bit:
            kept |= ms_bit
    _ccheck(_libc.mount(None, path_b, None, MS_REMOUNT | MS_BIND | MS_NOEXEC | MS_NOSUID | MS_NODEV | kept, None),
            "remount of the workdir noexec")


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


def _holder(names: tuple[str, ...], chan: socket.socket, workdir: str | None, proxy_port: int | None,
            uid: int, gid: int) -> None:
    """The forked child: create the namespaces, hand their fds over, then hold the pid namespace."""
    step = "unshare"
    try:
        flags = 0
        for name in names:
            flags |= FLAGS[name]
        _ccheck(_libc.unshare(flags), f"unshare({'+'.join(names)})")
        if "user" in names:
            step = "mapping the user namespace"
            _map_own_ids(uid, gid)
        if "mnt" in names and workdir is not None:
            step = "re-mounting the workdir noexec"
            _noexec_workdir(workdir)
        listener = None
        if "net" in names:
            step = "bringing up loopback"
            _loopback_up()
            if proxy_port is not None:
                step = f"listening on 127.0.0.1:{proxy_port}"
                listener = _listener(proxy_port)
        init_pid = 0
        if "pid" in names:  # first: pid_for_children only resolves once the namespace has its init
            step = "starting the pid namespace's init"
            init_pid = os.fork()
            if init_pid == 0:
                chan.close()
                if listener is not None:
                    listener.close()
                _reaper()
        step = "opening the namespace files"
        fds = [os.open(f"/proc/self/ns/{NS_FILES[n]}", os.O_RDONLY | os.O_CLOEXEC) for n in names]
        payload = fds + ([listener.fileno()] if listener is not None else [])
        socket.send_fds(chan, [b"ok %d" % init_pid], payload)
        chan.recv(1)  # the parent holds its own copies now
        for fd in fds:
            os.close(fd)
        if listener is not None:
            listener.close()
        chan.close()
        if init_pid:
            os.waitpid(init_pid, 0)  # hold on until close() kills the init (and the namespace with it)
    except BaseException as exc:
        try:
            chan.sendall(f"err {step}: {exc}".encode(errors="replace")[:500])
        except OSError:
            pass


@dataclass
class SessionNamespaces:
    """The nsfs fds a tool joins, the proxy listener bound inside, and the holder keeping the pid ns."""

    names: tuple[str, ...]
    fds: dict[str, int] = field(default_factory=dict)
    listener: socket.socket | None = None
    holder_pid: int | None = None
    init_pidfd: int | None = None

    def join_order(self) -> list[tuple[int, int]]:
        """(fd, CLONE_NEW*) in the order a tool must setns() them: user first, pid last."""
        return [(self.fds[n], FLAGS[n]) for n in self.names]

    def close(self) -> None:
        """Kill the pid namespace's init (every process in it dies with it), close everything."""
        if self.init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
            except OSError:
                pass
            os.close(self.init_pidfd)
            self.init_pidfd = None
        if self.holder_pid is not None:
            try:
                os.waitpid(self.holder_pid, 0)
            except ChildProcessError:
                pass
            self.holder_pid = None
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def _close_inherited(keep: int) -> None:
    """The holder outlives this call: it must not pin mur's sockets, pipes and files open."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass


def create(names: tuple[str, ...], *, workdir: str | None = None, proxy_port: int | None = None) -> SessionNamespaces:
    """Build ``names`` (NAMESPACES order) in a holder child; raises OSError naming the failed step."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    uid, gid = os.getuid(), os.getgid()
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            _close_inherited(theirs.fileno())
            _holder(names, theirs, workdir, proxy_port, uid, gid)
        finally:
            os._exit(0)
    theirs.close()
    made = SessionNamespaces(names, holder_pid=pid)
    try:
        ours.settimeout(HANDOVER_TIMEOUT)
        want = len(names) + (1 if proxy_port is not None and "net" in names else 0)
        msg, fds, _flags, _addr = socket.recv_fds(ours, 1024, want)
        if not msg.startswith(b"ok "):
            for fd in fds:
                os.close(fd)
            detail = msg[4:].decode(errors="replace") if msg.startswith(b"err ") else "the holder exited"
            raise OSError(f"cannot create the session namespaces ({'+'.join(names)}): {detail}")
        for fd in fds:
            os.set_inheritable(fd, False)
        made.fds = dict(zip(names, fds))
        if len(fds) > len(names):
            made.listener = socket.socket(fileno=fds[len(names)])
        init_pid = int(msg.split()[1])
        if init_pid:
            made.init_pidfd = os.pidfd_open(init_pid)
        ours.sendall(b"k")
    except BaseException:
        made.close()
        raise
    finally:
        ours.close()
    if made.init_pidfd is None:
        os.waitpid(pid, 0)  # without a pid namespace the holder is done
        made.holder_pid = None
    return made


def available(names: tuple[str, ...]) -> bool:
    """Can this process create ``names`` (measured by creating and discarding them)?"""
    try:
        create(names).close()
        return True
    except OSError:
        return False
