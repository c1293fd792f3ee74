"""The capsule host process: import the runtime once, then fork a capsule for each client.

    mur __capsule-host SOCKET KEY      (started by mur.caphost.client: `python -P -m mur ...`, or the
                                       runtime bundle's executable)

It lives with the CLI because what it runs in each capsule is the CLI: mur.cli.main hands it its own
entry point (so this module never imports it back); the client, the wire format and the security
context are below it, in mur.caphost.

Single-threaded (a fork copies only the calling thread): one selector over the listening socket, the
SIGCHLD wake-up pipe and each client's connection. It holds `<socket>.lock` (flock) for its life, so
two clients starting a host at once get one; its socket is bound as `<socket>.starting` and renamed
to its name once the imports are done (publish), so no client reaches a host still importing. After
the imports it freezes the garbage collector's view of them (gc.freeze), so no collection in a
capsule touches, and so copies, those pages.

Per client (its uid must be ours and its security context ours: mur.caphost.context): fork; the
child takes over the client's rlimits, umask, nice, OOM score, CPU affinity and cgroups, reports
ready (or why not) on a pipe, starts a session of its own, puts the client's stdin, stdout and
stderr on 0-2, its environment and working directory in place, and runs `mur ARGS` as
mur.cli.main would, exiting with its code. The host answers the client {"pid"} and a pidfd, then
{"exit": code} or {"signal": n} when it reaps the capsule; a client that goes away gets its capsule
SIGTERMed, and SIGKILLed ORPHAN_GRACE seconds later if it is still there. With no capsule and no
client for MUR_CAPSULE_HOST_IDLE_SECS (default 60) it exits.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import os
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mur.caphost import client, context, wire

IDLE_ENV = "MUR_CAPSULE_HOST_IDLE_SECS"
DEFAULT_IDLE = 60.0  # long enough for a crashed service to find it on restart
REQUEST_TIMEOUT = 5.0
LOCK_WAIT = 3.0  # seconds a new host waits for an exiting one's lock
ORPHAN_GRACE = 10.0  # seconds a capsule whose client went away has to stop after SIGTERM, before SIGKILL
# What a capsule imports on its way to serving (and what an agent or shell capsule adds): imported
# once here, shared by every capsule.
PRELOAD = (
    "mur.cli.main", "mur.cli.runfast", "mur.cli.runexec", "mur.cli.render", "mur.cli.progress",
    "mur.session.runner", "mur.session.prechecks", "mur.session.staging", "mur.session.tools", "mur.session.facts",
    "mur.session.workdir", "mur.session.murmur_md", "mur.session.executor", "mur.session.launch_checks",
    "mur.session.driver", "mur.session.hookwiring", "mur.manifest", "mur.manifest.capsule", "mur.manifest.config",
    "mur.resolve.artifacts", "mur.artifacts.installed", "mur.artifacts.package", "mur.trace.writer",
    "mur.sandbox.scope", "mur.sandbox.probe", "mur.sandbox.shell", "mur.a2a.lifecycle", "mur.a2a.listen",
    "mur.a2a.server", "mur.a2a.http1", "mur.wasm.host", "mur.wasm.engine", "mur.wasm.linker", "mur.wasm.callcontext",
    "mur.wasm.compile", "mur.wasm.cachekey", "mur.wasm.tierup", "mur.inference.driver", "mur.inference.loop", "mur.hooks.launch",
    "mur.resolve.env", "mur.resolve.capsule", "mur.session.lockpins", "mur.sandbox.guestdisk", "mur.sandbox.rootfs", "mur.sandbox.probecache",
    "mur.privatecache", "mur.wasm.env", "mur.wasm.peer", "mur.wasm.wasi_http", "encodings.idna",
    "wasmtime", "wasmtime.component", "yaml",
)


def preload() -> None:
    from mur.cli import noplugins

    noplugins.disable()  # as mur.cli.main does for a command (the host is started before that)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional part this install lacks: the capsule imports (or misses) it itself
    try:  # what every run computes once per process (cached): computed here, every capsule has it
        from mur.wasm.cachekey import fingerprints

        fingerprints()
    except ImportError:
        pass
    hold_components()


HOLD_DIRS = 4  # cache directories held for at once (the clients' last; each up to HOLD_MAX entries)


def hold_components(cache_dirs: list[str] | None = None) -> int:
    """Deserialize the compiled components used last (mur.wasm.engine.hold_recent) of each cache
    directory in `cache_dirs` (the host's own when None; those of other directories are let go): a
    capsule forked after finds them loaded. After every capsule too: what it compiled or used is
    next. Returns how many were added."""
    try:
        from mur.wasm.engine import hold_recent, let_go_except
    except ImportError:
        return 0
    if cache_dirs is None:
        return hold_recent()
    let_go_except(cache_dirs)
    return sum(hold_recent(Path(d)) for d in cache_dirs)


def cache_dir_of(request: dict) -> str | None:
    """The compile cache the capsule of `request` will use (its client's MUR_CACHE_DIR or HOME):
    a client with another one than the host's own (a bench, a service with its own HOME) found
    nothing held before, and deserialized its components itself (~13 ms of a ~85 ms warm run)."""
    env = request.get("env")
    if not isinstance(env, dict):
        return None
    from mur.errors import MurError
    from mur.wasm.cachekey import default_cache_dir

    try:
        found = default_cache_dir({str(k): str(v) for k, v in env.items()})
    except MurError:  # no home named: the capsule will say so; nothing to hold
        return None
    return str(found) if found.is_absolute() else None  # relative: to the client's directory, not ours


@dataclass
class Spare:
    """The next capsule, forked ahead of its client: it waits on `chan` for the request."""

    pid: int
    chan: socket.socket
    ready_r: int
    go_w: int

    def discard(self) -> None:
        """It sees EOF and exits (reaped with the others)."""
        self.chan.close()
        for fd in (self.ready_r, self.go_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class Host:
    def __init__(self, path: str, idle: float, cli: Callable[[list[str]], None]):
        self.path = path
        self.idle = idle
        self.cli = cli  # what a capsule runs: mur.cli.main.main
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}  # capsule pid -> its client's connection
        self.cache_dirs: list[str] = []  # the compile caches of the last clients, the latest last
        self.orphans: dict[int, float] = {}  # capsule pid whose client went away -> when it gets SIGKILL
        self.last_busy = time.monotonic()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.listener: socket.socket | None = None
        self.bound = path + ".starting"  # the socket's name until the imports are done (publish)
        self.bound_ino = 0
        self.lock_fd = -1  # `<socket>.lock`, held (flock) from listen() to the end
        self.own_context = context.security_context("self")
        # Forking this process takes ~4 ms (its page tables): the next capsule is forked while no
        # client waits, and a request only hands it what to run.
        self.spare: Spare | None = None

    # --- listening ------------------------------------------------------------------------

    def listen(self) -> bool:
        """Take the lock and the socket; False when another host has them."""
        lock = Path(self.path + ".lock")
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            self.lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            if wire.locked(self.lock_fd, lock):
                break
            os.close(self.lock_fd)
            self.lock_fd = -1
            # a holder without a named socket is on its way out (idle: it lets go in moments, and the
            # client that started this one is waiting for a socket) or still importing (it publishes
            # soon; this one gives up after LOCK_WAIT); or another build's host swept the file we opened
            if os.path.exists(self.path) or time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        wire.sweep_leftovers(Path(self.path))  # other builds' hosts that died unannounced
        os.ftruncate(self.lock_fd, 0)
        os.write(self.lock_fd, f"{os.getpid()}\n".encode())  # who the host is (`kill $(cat ...lock)` stops it)
        for stale in (self.path, self.bound):  # a dead host's (we hold the lock: no live one's)
            try:
                os.unlink(stale)
            except FileNotFoundError:
                pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            wire.addressed(sock, Path(self.bound), "bind")  # out of sight until publish()
        finally:
            os.umask(old)
        self.bound_ino = os.stat(self.bound).st_ino  # the file's (fstat of the socket gives sockfs's)
        sock.listen(128)
        sock.setblocking(False)
        self.listener = sock
        self.selector.register(sock, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "sigchld")
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self._stop())
        return True

    def publish(self) -> None:
        """Give the socket its name: only now can a client reach this host, so a run that takes a
        host only if one is up (mur.caphost.client.IF_UP) never waits for these imports."""
        os.rename(self.bound, self.path)
        self.bound = self.path

    def _stop(self) -> None:
        self.idle = 0.0
        self.last_busy = 0.0

    def serve(self) -> None:
        gc.collect()
        gc.freeze()  # the imports' objects: never scanned (or written) by a capsule's collections
        while True:
            if not self.children and time.monotonic() - self.last_busy >= self.idle:
                break
            if self.spare is None and self.idle > 0:
                self._fork_spare()
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "accept":
                    self._accept()
                elif key.data == "sigchld":
                    self._reap()
                    if hold_components(self.cache_dirs or None) and self.spare is not None:
                        self.spare.discard()  # forked before those were loaded: the next one has them
                        self.spare = None
                else:
                    self._client_gone(key.data)
            self._kill_late_orphans()
        if self.spare is not None:
            self.spare.discard()
            self.spare = None
        self._close()

    def _close(self) -> None:
        if self.listener is not None:
            try:
                if os.stat(self.bound).st_ino == self.bound_ino:  # ours, not a successor's
                    os.unlink(self.bound)
            except OSError:
                pass
            self.listener.close()
        if self.lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(self.lock_fd, 0)  # still ours: the pid in it would name no host any more

    # --- one client -----------------------------------------------------------------------

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        self.last_busy = time.monotonic()
        conn.setblocking(True)
        conn.settimeout(REQUEST_TIMEOUT)
        fds: list[int] = []
        try:
            if wire.peer_uid(conn) != os.geteuid():
                raise PermissionError("another uid")
            request, fds = wire.recv(conn)
            if request is None or len(fds) != 3:
                raise ValueError("malformed request")
            client = wire.peer_pid(conn)
            why = self._refusal(client)
            if why is not None:
                wire.send(conn, {"refused": why})
                raise ValueError(why)
            self._note_cache_dir(request)  # a refused client runs its capsule itself: nothing to hold for it
            pid = self._fork(conn, client, request, fds)
        except (OSError, ValueError) as exc:
            for fd in fds:
                os.close(fd)
            try:
                wire.send(conn, {"refused": str(exc)})
            except OSError:
                pass
            conn.close()
            return
        for fd in fds:
            os.close(fd)
        if pid is None:
            conn.close()
            return
        conn.settimeout(None)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)

    def _note_cache_dir(self, request: dict) -> None:
        found = cache_dir_of(request)
        if found is not None:
            self.cache_dirs = [d for d in self.cache_dirs if d != found][-(HOLD_DIRS - 1):] + [found]

    def _refusal(self, client: int) -> str | None:
        if threading.active_count() != 1:
            return "the host is not single-threaded"
        diff = context.differences(self.own_context, context.security_context(client))
        return f"another security context ({', '.join(diff)})" if diff else None

    def _fork(self, conn: socket.socket, client: int, request: dict, fds: list[int]) -> int | None:
        """Start the capsule (the spare, else a fork now); it runs only once the client has its pid
        and said go (until then the client may still run the capsule itself, so there is never a
        second one)."""
        pid, ready_r, go_w = self._from_spare(client, request, fds) or self._fork_now(conn, client, request, fds)
        with os.fdopen(ready_r, "rb") as ready:
            answer = ready.read().decode(errors="replace")
        go = False
        try:
            if answer != "ok":
                wire.send(conn, {"refused": answer or "the capsule did not start"})
                return None
            pidfd = os.pidfd_open(pid)
            try:
                wire.send(conn, {"pid": pid}, [pidfd])
            finally:
                os.close(pidfd)
            ack, extra = wire.recv(conn)
            for fd in extra:
                os.close(fd)
            go = bool(ack and ack.get("go"))
            return pid if go else None
        finally:
            if go:
                os.write(go_w, b"go")
            os.close(go_w)  # without "go": the capsule exits before it ran anything
            if not go:
                os.waitpid(pid, 0)

    def _fork_now(self, conn: socket.socket, client: int, request: dict, fds: list[int]) -> tuple[int, int, int]:
        taken = context.settings(client)
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the capsule
            os.close(ready_r)
            os.close(go_w)
            conn.close()
            self._child(ready_w, go_r, lambda: (taken, request, fds))
        os.close(ready_w)
        os.close(go_r)
        return pid, ready_r, go_w

    def _fork_spare(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the next capsule: it waits for its request
            ours.close()
            os.close(ready_r)
            os.close(go_w)
            self._child(ready_w, go_r, lambda: _await_request(theirs))
        theirs.close()
        os.close(ready_w)
        os.close(go_r)
        self.spare = Spare(pid, ours, ready_r, go_w)

    def _from_spare(self, client: int, request: dict, fds: list[int]) -> tuple[int, int, int] | None:
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            wire.send(spare.chan, {"client": client, "request": request}, fds)
        except OSError:  # it died meanwhile: a fork now
            spare.discard()
            return None
        spare.chan.close()
        return spare.pid, spare.ready_r, spare.go_w

    def _child(self, ready_w: int, go_r: int, what: Callable[[], tuple[dict, dict, list[int]]]) -> None:
        """In the capsule: let go of the host's own files, take what to run (`what`: the client's
        settings, its request and stdio), take over the settings, say ready, wait for go, run."""
        code = 1
        host = os.getppid()
        try:
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            for conn in self.children.values():
                conn.close()
            self.listener.close()
            for fd in (self.wake_r, self.wake_w, self.lock_fd):
                os.close(fd)
            taken, request, fds = what()
            why = context.take_over(taken)
            os.write(ready_w, b"ok" if why is None else why.encode())
            os.close(ready_w)
            if why is not None or os.read(go_r, 2) != b"go":
                os._exit(1)
            os.close(go_r)
            os.setsid()
            _die_with_parent(host)  # the host gone means its client heard EOF and gave the capsule up
            code = run_capsule(request, fds, self.cli)
        except BaseException:  # noqa: BLE001 - a capsule's failure must never reach the host's loop
            traceback.print_exc()
        finally:
            os._exit(code)

    def _reap(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except OSError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.orphans.pop(pid, None)
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            self.last_busy = time.monotonic()
            self.selector.unregister(conn)
            outcome = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.waitstatus_to_exitcode(status)}
            try:
                wire.send(conn, outcome)
            except OSError:
                pass
            conn.close()

    def _client_gone(self, pid: int) -> None:
        """The client's connection is readable: it closed (it sends nothing else), so its capsule goes."""
        conn = self.children.get(pid)
        if conn is None:
            return
        try:
            if conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        self.selector.unregister(conn)
        try:
            os.kill(pid, signal.SIGTERM)  # still our unreaped child: the pid is its own
        except OSError:
            pass
        self.orphans[pid] = time.monotonic() + ORPHAN_GRACE

    def _kill_late_orphans(self) -> None:
        """SIGKILL a capsule that outlived its client by ORPHAN_GRACE (a guest deaf to SIGTERM): in-process
        it would have died with the killed client."""
        now = time.monotonic()
        for pid, due in list(self.orphans.items()):
            if now >= due and pid in self.children:  # unreaped: still our child, the pid is its own
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                del self.orphans[pid]


def _await_request(chan: socket.socket) -> tuple[dict, dict, list[int]]:
    """In a spare: the request the host hands it (its client's settings are read here); EOF (the
    host discarded it, or ended): exit, nothing ran."""
    try:
        message, fds = wire.recv(chan)
    except (OSError, ValueError):
        message, fds = None, []
    chan.close()
    if not message or len(fds) != 3:
        os._exit(0)
    return context.settings(int(message["client"])), message["request"], fds


def _die_with_parent(host: int) -> None:
    """SIGTERM this process when the host dies (PR_SET_PDEATHSIG)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != host:  # it died before that took effect
        os.kill(os.getpid(), signal.SIGTERM)


def run_capsule(request: dict, fds: list[int], cli: Callable[[list[str]], None]) -> int:
    """In the forked capsule: the client's stdio, environment, directory and arguments, then `mur`
    (`cli`, mur.cli.main.main)."""
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    env = {str(k): str(v) for k, v in request.get("env", {}).items()}
    client.HOSTED = True  # this process is the capsule: no second hand-off, whatever MUR_CAPSULE_HOST says
    os.environ.clear()
    os.environ.update(env)
    _reopen_stdio(bool(env.get("PYTHONUNBUFFERED")))
    try:
        os.chdir(request["cwd"])
    except (OSError, KeyError, TypeError) as exc:
        print(f"error[E-IO-003]: cannot enter the working directory: {exc}", file=sys.stderr)
        return 1
    argv = [str(a) for a in request.get("argv", [])]
    sys.argv = ["mur", *argv]
    import random

    random.seed()  # every capsule forks the host's state: none may share its sequence
    try:
        cli(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return code


def _reopen_stdio(unbuffered: bool) -> None:
    """New stdin/stdout/stderr objects on fds 0-2 (the host's were set up for its own /dev/null)."""
    enc, errors = sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding=enc, errors=errors)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        line = name == "stderr" or os.isatty(fd)
        stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding=enc,
                                  errors="backslashreplace" if name == "stderr" else errors,
                                  line_buffering=line, write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def main(argv: list[str], cli: Callable[[list[str]], None]) -> int:
    """`mur __capsule-host SOCKET KEY`: serve capsules, each running `cli` (mur.cli.main.main)."""
    if len(argv) != 2:
        print("usage: mur __capsule-host SOCKET KEY", file=sys.stderr)
        return 2
    path, key = argv
    if wire.code_key() != key:
        return 1  # not the code the client would run: never serve under its name
    try:
        idle = float(os.environ.get(IDLE_ENV, "") or DEFAULT_IDLE)
    except ValueError:
        idle = DEFAULT_IDLE
    host = Host(path, idle, cli)
    if not host.listen():
        return 0  # another host took it
    preload()
    host.publish()
    host.serve()
    return 0
