"""The session's spawner: one small process that carries the session's sandbox and starts every tool.

Why: a tool call used to fork mur itself (a large, multi-threaded address space, and
``preexec_fn`` rules out vfork) and then, in each child, join the cgroup (on a v1 hierarchy a
migration waits for an RCU grace period: milliseconds), the namespaces, drop the uid, apply
Landlock and seccomp. All of that is the same for every call of a session, so this process applies
it to itself once and then only ``posix_spawn``s (vfork + exec: no Python, no page-table copy in
the child) each tool, which inherits all of it: Android's zygote and Python's forkserver do the
same for the same reason.

Started by ``mur.sandbox.spawn.Spawner`` as a fresh interpreter (``python -I -S``: no site, no
environment, stdlib only, single-threaded, which ``setns(user)`` requires), it applies, in the
order environment.md section 0 verified for a tool:

  1. joins the session cgroup(s)    -- while still root: cgroup.procs is root-owned; tools are then
                                       born inside (no per-call migration)
  2. the tools' rlimits, hard       -- inherited by every tool exactly (see "tight limits" below);
                                       in a cgroup shared with mur, oom_score_adj 1000 (inherited too)
  3. joins the namespaces           -- user first (mur not root), net, ipc, mnt (then re-enters the
                                       cwd through the noexec mount), pid: setns(pid) moves only the
                                       caller's children, so every tool is pid 2+ of the namespace
                                       while this process stays outside it: no tool can name it
  4. builds the Landlock ruleset    -- in the tools' mount namespace: each granted path is the
                                       one tools see (the session disk's workdir, the composed root)
  5. drops to the session uid       -- root only: setgroups([]), setresgid, setresuid
  6. non-dumpable                   -- no /proc/<pid>/mem, fd/ or environ for a process of its uid
  7. Landlock restrict_self         -- sets no_new_privs first
  8. seccomp                        -- last; the filter is the tools' own

Tight limits: when ``max_open_files`` or ``memory_bytes`` would not leave this interpreter room to
work (below ``CARRY_MIN_NOFILE`` / ``CARRY_MIN_AS``), or ``cpu_seconds`` is below ``CARRY_MIN_CPU``
(the interpreter's own start would use a good part of it), it keeps the inherited limits and forks
instead; the child then sets the tools' hard limits before its exec (a fork of this ~15 MB process,
still no cgroup migration). Either way a tool gets exactly the manifest's limits. RLIMIT_CPU counts
this process's own CPU time too, so mur restarts it once it has used half (``spawner_cpu``).

Per call it receives the tool's stdin, stdout and stderr (SCM_RIGHTS) straight into fds 0, 1 and 2
(its own are closed, so the kernel installs them there; everything else it holds is close-on-exec),
starts the tool in a session of its own, waits on a pidfd (and on the control socket: mur gone
means the call's group is killed), kills what is left of the call's process group while the leader
is still a zombie (so its pgid cannot have been reused), reaps it with ``wait4`` and reports the raw
status and CPU time. It reads only what mur writes on the control socket and exits when mur's end
closes.

Protocol (one UNIX stream socket, its fd on the command line): frames of a 4-byte big-endian length
and a JSON object. This module imports nothing outside the standard library and mur.sandbox's
ctypes appliers (which are stdlib-only too).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import socket
import struct
import sys

# Imported now: once Landlock is in force this process can open no file, so no later import works.
from mur.sandbox import landlock, rlimits, seccomp
from mur.sandbox.namespaces import CLONE_NEWNS

FRAME = struct.Struct("!I")
MAX_FRAME = 64 << 20
PR_SET_DUMPABLE = 4
CARRY_MIN_NOFILE = 16  # stdio + a pidfd + the control socket, with room to spare
CARRY_MIN_AS = 128 << 20  # this interpreter maps ~17 MB
# RLIMIT_CPU counts this process's own start too (an interpreter's imports: ~1 s on an emulated CPU
# under load); below this the spawner forks and the tool's limit counts the tool alone
CARRY_MIN_CPU = 10


# --- frames (both ends) ---------------------------------------------------------------------------


def send(sock: socket.socket, obj: dict, fds: list[int] | tuple[int, ...] = ()) -> None:
    """One frame; ``fds`` travel with its first byte."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    head = FRAME.pack(len(body))
    if fds:
        socket.send_fds(sock, [head], list(fds))
    else:
        sock.sendall(head)
    sock.sendall(body)


def recv(sock: socket.socket, maxfds: int = 0, flags: int = 0) -> tuple[dict | None, list[int]]:
    """The next frame and the fds that came with it; (None, []) at end of stream."""
    fds: list[int] = []
    head = b""
    while len(head) < FRAME.size:
        if maxfds and not head:
            data, got, _flags, _addr = socket.recv_fds(sock, FRAME.size, maxfds, flags)
            fds += got
        else:
            data = sock.recv(FRAME.size - len(head))
        if not data:
            _close_all(fds)
            return None, []
        head += data
    (size,) = FRAME.unpack(head)
    if size > MAX_FRAME:
        _close_all(fds)
        raise ValueError(f"frame of {size} bytes")
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(min(size - len(body), 1 << 20))
        if not chunk:
            _close_all(fds)
            return None, []
        body += chunk
    return json.loads(body), fds


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def carries_limits(limits: list | tuple) -> bool:
    """Whether this process can live under the tools' own rlimits (else it forks and the child sets them)."""
    wanted = dict((name, value) for name, value in limits)
    nofile, space, cpu = wanted.get("NOFILE", -1), wanted.get("AS", -1), wanted.get("CPU", -1)
    return ((nofile < 0 or nofile >= CARRY_MIN_NOFILE) and (space < 0 or space >= CARRY_MIN_AS)
            and (cpu < 0 or cpu >= CARRY_MIN_CPU))


# --- applying the session's sandbox (once) ----------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _ccheck(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def apply(cfg: dict) -> None:
    """Apply the session's sandbox to this process (raises RuntimeError naming the step)."""
    step = "entering the workdir"
    try:
        os.chdir(cfg["cwd"])  # every tool starts there (posix_spawn keeps the spawner's cwd)
        step = "joining the cgroup"
        pid = str(os.getpid()).encode()
        for fd in cfg["cgroup_fds"]:
            os.write(fd, pid)
            os.close(fd)
        if cfg["carry"]:
            step = "setting rlimits"
            rlimits.apply(tuple(tuple(item) for item in cfg["rlimits"]))
        if cfg["oom_score_adj"] is not None:  # a cgroup shared with mur: a tool, never mur, is the OOM pick
            step = "raising oom_score_adj"
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(cfg["oom_score_adj"]).encode())
            finally:
                os.close(fd)
        for fd, flag in cfg["joins"]:
            step = f"joining the session's namespaces ({flag:#x})"
            _ccheck(_libc.setns(fd, flag), f"setns({flag:#x})")
            os.close(fd)
            if flag == CLONE_NEWNS:  # setns reset the root and cwd: the tools' root, their workdir
                os.chdir(cfg["cwd"])
        ruleset = None
        if cfg["landlock"] is not None:
            step = "building the Landlock ruleset"
            ll = cfg["landlock"]
            ruleset = landlock.build_ruleset(
                ll["abi"], ll["handled_fs"], [(path, access) for path, access in ll["grants"]],
                handled_net=ll["handled_net"], tcp_connect=tuple(ll["tcp_connect"]), tcp_bind=(),
                scoped=ll["scoped"], missing_ok=True)
        if cfg["run_as"] is not None:
            uid, gid = cfg["run_as"]
            step = f"dropping to uid {uid}"
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        step = "making the spawner non-dumpable"
        _ccheck(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
        if ruleset is not None:
            step = "applying Landlock"
            landlock.restrict_self(ruleset.fd)
            ruleset.close()
        if cfg["bpf"]:
            step = "installing the seccomp filter"
            seccomp.install(seccomp.Program([bytes.fromhex(blob) for blob in cfg["bpf"]]))
    except BaseException as exc:
        raise RuntimeError(f"{step}: {exc}") from exc


# --- one call -----------------------------------------------------------------------------------


def _forked(req: dict, limits: list) -> int | dict:
    """Tight limits: fork, set the tools' hard limits in the child, exec."""
    rd, wr = os.pipe()  # close-on-exec: EOF means the exec happened
    try:
        pid = os.fork()
        if pid == 0:
            step = "setting rlimits"
            try:
                os.setsid()
                rlimits.apply(tuple(tuple(item) for item in limits))
                step = "exec"
                os.execve(req["path"], req["argv"], req["env"])
            except BaseException as exc:
                try:
                    os.write(wr, json.dumps(_failure(step, exc)).encode()[:4000])
                except BaseException:
                    pass
            os._exit(127)
        os.close(wr)
        wr = -1
        data = b""
        while chunk := os.read(rd, 4096):
            data += chunk
    finally:
        os.close(rd)
        if wr >= 0:
            os.close(wr)
    if data:
        os.waitpid(pid, 0)
        return json.loads(data)
    return pid


def _failure(step: str, exc: BaseException) -> dict:
    return {"step": step, "errno": getattr(exc, "errno", None) or 0,
            "message": getattr(exc, "strerror", None) or str(exc)}


def _spawn(req: dict, cfg: dict) -> int | dict:
    """Start one tool on the stdio now at fds 0-2; returns its pid or the failed step."""
    if not cfg["carry"]:
        return _forked(req, cfg["rlimits"])
    try:
        return os.posix_spawn(req["path"], req["argv"], req["env"], setsid=True)
    except (OSError, ValueError) as exc:
        return _failure("exec", exc)


def _wait(ctl: socket.socket, pid: int) -> dict | None:
    """Wait for the tool; None when mur's end closed first (the tool's group is then killed)."""
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(ctl.fileno(), select.POLLIN | select.POLLHUP)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if pidfd in ready:
                break
            if ctl.fileno() in ready:  # mur never writes during a call: its end closed
                _killpg(pid)
                os.waitpid(pid, 0)
                return None
    finally:
        os.close(pidfd)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    _killpg(pid)  # the leader is a zombie still holding the pgid: the group cannot be another's
    _pid, status, usage = os.wait4(pid, 0)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {"status": status, "cpu": usage.ru_utime + usage.ru_stime, "spawner_cpu": own.ru_utime + own.ru_stime}


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def serve(ctl: socket.socket, cfg: dict) -> None:
    while True:
        req, fds = recv(ctl, maxfds=3)  # inheritable, on 0, 1, 2: the tool's stdio as they are
        if req is None:
            return
        try:
            if sorted(fds) != [0, 1, 2]:  # not all installed (fd limit), or a protocol error
                outcome: int | dict = {"step": "receiving the tool's stdio", "errno": 0,
                                       "message": f"got fds {fds}, not 0-2"}
            else:
                outcome = _spawn(req, cfg)
        finally:
            _close_all(fds)
        if isinstance(outcome, dict):
            send(ctl, {"failed": outcome})
            continue
        send(ctl, {"pid": outcome})
        done = _wait(ctl, outcome)
        if done is None:
            return
        send(ctl, done)


def main(argv: list[str] | None = None) -> None:
    """``python -I -S -c ... <ctl fd>``: handshake, apply, serve until mur's end closes."""
    args = sys.argv[1:] if argv is None else argv
    ctl = socket.socket(fileno=int(args[-1]))
    ctl.set_inheritable(False)
    # Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored across execve, and a tool
    # must see both (`yes | head`, and the FSIZE attribution). SIGINT: default, like any tool.
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    # fds 0-2 are left free for each call's stdio; nothing of ours may print into a tool's pipes
    sys.stdin = sys.stdout = sys.stderr = None  # type: ignore[assignment]
    for fd in (0, 1, 2):
        try:
            os.close(fd)
        except OSError:
            pass
    cfg, _ = recv(ctl)
    if cfg is None:
        return
    try:
        apply(cfg)
    except BaseException as exc:
        send(ctl, {"error": str(exc)})
        return
    send(ctl, {"ready": os.getpid()})
    serve(ctl, cfg)
