"""`mur run` as a client of the capsule host (`handoff` says which runs): hand the run over, stay the
process the service manager watches, forward its signals, exit as the capsule did.

Returns None wherever the host cannot take the run exactly as this process would have run it (no
host and none could be started, another uid, another security context, a cgroup it cannot join):
the caller then runs the capsule itself. Once the host says the capsule is running, this process
only relays: SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 go to the capsule (through a
pidfd, so never to a recycled pid), and it exits with the capsule's code, or dies of its signal.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every client's start)
if TYPE_CHECKING:
    import socket
# socket and mur.caphost.wire are imported by the functions that talk to a host: a run that stays
# in-process (interactive, MUR_CAPSULE_HOST=off) never loads them

ENV = "MUR_CAPSULE_HOST"
ON = ("on", "1", "true", "yes")  # its values that hand over every non-interactive run
HOSTED = False  # set in a capsule the host forked: it is the hand-off, never a second one
START_TIMEOUT = 20.0  # seconds for a new host to import the runtime and listen
RECENT = 60.0  # a good run that found no host starts one when another ended this recently
RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
           signal.SIGWINCH)
# What a new host inherits from the client: enough to import the same code, nothing else (a host
# outlives the client that started it, and serves others: none of this client's secrets).
HOST_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONPATH", "PYTHONHOME", "PYTHONPYCACHEPREFIX",
            "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "XDG_RUNTIME_DIR", "MUR_CAPSULE_HOST_IDLE_SECS")


WAIT = "wait"  # hand over; start a host if none runs, and wait for it
IF_UP = "if-up"  # hand over to a host that runs already; none: run here (and perhaps start one: start_for_next)


def handoff(args: list[str]) -> str | None:
    """How this `mur run` goes to the host: WAIT, IF_UP or None (in-process).

    With MUR_CAPSULE_HOST unset or `auto`, and outside a systemd unit (`in_service_unit`): a
    service's run (it stays up) WAITs; a one-shot task run and an `--explain-scope` go IF_UP, so no
    such run ever waits for a host to import the runtime, and when they come in a row, the ones
    after the second find one (start_for_next). With `on`: every non-interactive run WAITs, in a
    unit too. With `off` (or anything else): None.
    Interactive (a terminal on stdin, stdout or stderr): a one-shot run and an explain go IF_UP, as
    anywhere (the capsule writes to the same terminal; Ctrl-C, Ctrl-Z and a resized window are
    relayed: `_forward_signals`); a service's run stays here (it is a terminal's job for as long as
    it serves)."""
    if args[:1] != ["run"] or HOSTED or "--help" in args:
        return None
    asked = os.environ.get(ENV, "").strip().lower()
    if asked not in ON and asked not in ("", "auto"):
        return None
    explain = "--explain-scope" in args
    service = stays_up(args[1:]) and not explain
    if interactive():
        return None if service or in_service_unit() else IF_UP
    if asked in ON:
        return WAIT
    if in_service_unit():
        return None
    return WAIT if service else IF_UP


def interactive() -> bool:
    """A terminal on stdin, stdout or stderr."""
    try:
        return any(os.isatty(fd) for fd in (0, 1, 2))
    except OSError:
        return True  # cannot tell: as at a terminal, which keeps the run here


def stays_up(run_args: list[str]) -> bool:
    """A run that stays up: no task (it waits for A2A tasks), or `--lifecycle-after-task sleep`."""
    task = any(a in ("-t", "--task") or a.startswith("--task=") or (a.startswith("-t") and not a.startswith("--"))
               for a in run_args)
    sleeps = any(a == "--lifecycle-after-task=sleep" or (a == "--lifecycle-after-task" and nxt == "sleep")
                 for a, nxt in zip(run_args, run_args[1:] + [""]))
    return not task or sleeps


def in_service_unit(cgroup_file: str = "/proc/self/cgroup") -> bool:
    """Is this process in a systemd unit's cgroup (`*.service`, `*.scope`)? A host started there
    would live in that unit, and stopping the unit would kill it and with it every other unit's
    capsule: such a run stays in-process unless MUR_CAPSULE_HOST=on says otherwise."""
    try:
        with open(cgroup_file, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    return any(part.endswith((".service", ".scope"))
               for line in lines for part in line.split(":", 2)[-1].split("/"))


def host_command(sock_path: Path, key: str) -> list[str]:
    if getattr(sys, "frozen", False):  # the runtime bundle: its executable is mur itself
        return [sys.executable, "__capsule-host", str(sock_path), key]
    return [sys.executable, "-P", "-m", "mur", "__capsule-host", str(sock_path), key]


def _connect(path: Path) -> socket.socket | None:
    import _socket as socket  # the C module: no socket.py (its enum conversions, selectors) in a client

    from mur.caphost import wire

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        wire.addressed(sock, path, "connect")
    except OSError:
        sock.close()
        return None
    if wire.peer_uid(sock) != os.geteuid():  # not ours (the directory is 0700: it cannot be, but check)
        sock.close()
        return None
    return sock


def _start_host(path: Path, key: str) -> None:
    import subprocess  # only to start one: a client that finds its host never loads it

    env = {k: v for k, v in os.environ.items() if k in HOST_ENV}
    # the host imports what this process imports: its module path, however it was made
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    subprocess.Popen(host_command(path, key), env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


_later: tuple[Path, str] | None = None  # IF_UP found no host: where to start one after the run


def connect(start: bool = True) -> socket.socket | None:
    """A connection to this build's host, started if none runs (`start`); None when there is none to
    be had (without `start`: remembered, for `start_for_next`)."""
    global _later
    from mur.caphost import wire

    key = wire.code_key()
    path = wire.socket_path(key)
    if path is None:
        return None
    sock = _connect(path)
    if sock is not None:
        return sock
    if not start:
        _later = (path, key)
        return None
    deadline, started = time.monotonic() + START_TIMEOUT, False
    while time.monotonic() < deadline:
        if not started and not starting(path):  # one that is importing publishes soon: no second one
            _start_host(path, key)
            started = True
        time.sleep(0.02)
        sock = _connect(path)
        if sock is not None:
            return sock
    return None


def starting(path: Path) -> bool:
    """Is a host alive that has not given its socket its name yet (importing; or one on its way out,
    which lets go of its lock in moments)? Its lock is held. Asked only where no socket answered."""
    from mur.fsutil import lock_held

    return lock_held(f"{path}.lock")


def run_via_host(args: list[str], mode: str = WAIT) -> int | None:
    """Run `mur ARGS` in a capsule the host forks (`mode` WAIT: one started if none runs); its exit
    code, or None: run it here instead."""
    from mur.caphost import wire

    sock = connect(start=mode == WAIT)
    if sock is None:
        _why("no host runs (good runs in a row start one)" if _later else "no host could be reached or started")
        return None
    try:  # a bare _socket.socket: no context manager
        try:
            sock.settimeout(START_TIMEOUT)  # a host still importing answers within this
            wire.send(sock, {"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}, [0, 1, 2])
            reply, fds = wire.recv(sock)
        except (OSError, ValueError):
            return None
        if reply is None or "pid" not in reply:
            for fd in fds:
                os.close(fd)
            _why((reply or {}).get("refused", "the host went away"))
            return None  # refused, or the host went away: nothing ran
        pidfd = fds[0] if fds else None
        for fd in fds[1:]:
            os.close(fd)
        pid = int(reply["pid"])
        _forward_signals(pid, pidfd)  # before "go": no signal may find this process not relaying
        try:
            wire.send(sock, {"go": True})  # from here the capsule runs there, and only there
        except OSError:
            _restore_signals()
            return None
        sock.settimeout(None)
        if os.environ.get("MUR_CAPSULE_HOST_DEBUG") == "2":
            print(f"note: capsule host: the capsule runs as pid {pid}, forked by the host", file=sys.stderr)
        return _relay(sock)
    finally:
        sock.close()


def start_for_next() -> None:
    """After an IF_UP run that found no host went well: start one for the next runs (not waited
    for), when runs come often enough to use it (`_recent`)."""
    global _later
    if _later is not None:
        path, key = _later
        _later = None
        if starting(path) or path.exists():
            return  # another run's host is on its way
        if not _recent(path):
            return
        try:
            _start_host(path, key)
        except OSError:
            pass  # the next run starts in-process again: nothing lost


def _recent(path: Path) -> bool:
    """Did another good run that found no host end less than RECENT seconds ago? This one is
    remembered either way (the mtime of `<socket>.last`, in our 0700 directory). A run now and then
    (a cron job) never pays for a host it would not use; a second run within a minute starts one."""
    stamp = f"{path}.last"
    try:
        before: float | None = os.stat(stamp).st_mtime
    except OSError:
        before = None
    try:
        fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return before is not None and 0 <= time.time() - before < RECENT


def _why(text: str) -> None:
    """MUR_CAPSULE_HOST_DEBUG=1: say on stderr why this run does not go through the host (=2: and
    which pid the capsule has when it does)."""
    if os.environ.get("MUR_CAPSULE_HOST_DEBUG") in ("1", "2"):
        print(f"note: capsule host: {text}; running the capsule here", file=sys.stderr)


_previous: dict[int, object] = {}


def _forward_signals(pid: int, pidfd: int | None) -> None:
    """Relay RELAYED to the capsule; and job control: the capsule is not in this terminal's session
    (the host made it a session of its own), so the terminal's Ctrl-Z (SIGTSTP) stops only this
    client. It stops the capsule first, then itself; the shell's `fg` (SIGCONT) continues both."""
    def send(signum: int) -> None:
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(pid, signum)
        except OSError:
            pass

    def forward(signum: int, _frame: object) -> None:
        send(signum)

    def stop(_signum: int, _frame: object) -> None:
        send(signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)

    def resume(_signum: int, _frame: object) -> None:
        send(signal.SIGCONT)

    for signum in RELAYED:
        _previous[signum] = signal.signal(signum, forward)
    _previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, stop)
    _previous[signal.SIGCONT] = signal.signal(signal.SIGCONT, resume)


def _restore_signals() -> None:
    for signum, handler in _previous.items():
        signal.signal(signum, handler)


def _relay(sock: socket.socket) -> int:
    from mur.caphost import wire

    while True:
        try:
            reply, _ = wire.recv(sock)
            break
        except InterruptedError:
            continue
        except (OSError, ValueError):
            reply = None
            break
    if reply is None:  # the host died: the capsule is gone with it or orphaned; either way we failed
        return 1
    if "signal" in reply:
        signum = int(reply["signal"])
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # die of it, as the capsule did
        return 128 + signum
    return int(reply.get("exit", 1))
