"""A loopback TCP relay that breaks the link on purpose: the fault injector of the deploy fault suite.

    with Relay(upstream_port=sshd_port) as relay:        # listens on 127.0.0.1:relay.port
        relay.arm(5_000_000, "up", "cut")                  # forward exactly 5 MB client->server, then cut
        ... run the client against relay.port ...
        relay.blackhole()                                  # or on command: go silent
        relay.pass_through()                               # the link comes back

What a link can do here, each as a method (callable from any thread) or as a trigger's action:

  pass_through  forward both ways (the default); connections frozen by a blackhole resume
  cut           close every current connection now: both ends read what was already delivered,
                then EOF (`cut(rst=True)` / action "reset": an RST, which also drops unread data)
  refuse        close the listening socket: new connections get ECONNREFUSED until pass_through
  blackhole     go silent: existing and new connections stay open (new ones are accepted and held),
                nothing is forwarded in either direction and nothing is read, so the sender's
                buffers fill as behind a dead route

Triggers (`arm`) fire once, when the bytes forwarded in one direction since arming reach a count:
exactly that many bytes are delivered, then the actions run inside the relay's own thread before
the next byte moves, so "cut after N bytes" is exact. Scenarios that react to the client's own
progress call the methods directly. `events` logs what happened (for a failing test's message).

One thread per relay, non-blocking sockets and a selector; stdlib only. Not part of the product
(mur/testing: nothing under mur/ outside it imports it).
"""

from __future__ import annotations

import errno
import queue
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Union

UP, DOWN, ANY = "up", "down", "any"  # client -> server, server -> client, either
BUFFER = 256 * 1024  # bytes held per direction before the relay stops reading the sender
Action = Union[str, Callable[["Relay"], None]]


@dataclass
class Trigger:
    after: int
    direction: str
    actions: tuple[Action, ...]
    name: str
    seen: int = 0
    fired: threading.Event = field(default_factory=threading.Event)

    def remaining(self) -> int:
        return self.after - self.seen


class _Pipe:
    """One relayed connection: the client's socket, the server's, and a buffer each way."""

    def __init__(self, number: int, client: socket.socket):
        self.number = number
        self.client = client
        self.server: socket.socket | None = None
        self.buf = {UP: bytearray(), DOWN: bytearray()}
        self.eof = {UP: False, DOWN: False}  # the sender of that direction closed its side
        self.shut = {UP: False, DOWN: False}  # we passed that EOF on

    def src(self, direction: str) -> socket.socket | None:
        return self.client if direction == UP else self.server

    def dst(self, direction: str) -> socket.socket | None:
        return self.server if direction == UP else self.client

    def socks(self) -> list[socket.socket]:
        return [s for s in (self.client, self.server) if s is not None]


class Relay:
    """See the module docstring. `upstream_port` on `upstream_host` is where connections go."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", *, port: int = 0, name: str = "relay"):
        self.upstream = (upstream_host, int(upstream_port))
        self.name = name
        self.silent = False
        self.accepting = True
        self.bytes = {UP: 0, DOWN: 0}
        self.accepted = 0
        self.events: list[tuple[float, str]] = []
        self._t0 = time.monotonic()
        self._pipes: dict[int, _Pipe] = {}
        self._triggers: list[Trigger] = []
        self._calls: queue.Queue[tuple[Callable[[], object], threading.Event, list]] = queue.Queue()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._listener: socket.socket | None = None
        self._listen(port)
        self.port = self._listener.getsockname()[1]  # type: ignore[union-attr]
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"relay-{self.name}", daemon=True)
        self._thread.start()

    # --- public controls (any thread) ----------------------------------------------------------

    def pass_through(self) -> None:
        self._call(self._do_pass)

    def cut(self, rst: bool = False) -> None:
        self._call(lambda: self._do_cut(rst))

    def refuse(self) -> None:
        self._call(self._do_refuse)

    def blackhole(self) -> None:
        self._call(self._do_blackhole)

    def arm(self, after_bytes: int, direction: str = ANY, actions: Action | Iterable[Action] = "cut",
            name: str = "") -> Trigger:
        """Run `actions` (method names of this class, or callables taking the relay) once exactly
        `after_bytes` more bytes have been forwarded in `direction` (UP, DOWN or ANY)."""
        if direction not in (UP, DOWN, ANY):
            raise ValueError(f"direction must be up, down or any, not {direction!r}")
        acts = (actions,) if isinstance(actions, str) or callable(actions) else tuple(actions)
        trig = Trigger(int(after_bytes), direction, acts, name or f"{'+'.join(map(_act_name, acts))} after "
                       f"{after_bytes} {direction} bytes")
        self._call(lambda: self._triggers.append(trig))
        if trig.after <= 0:
            self._call(lambda: self._fire(trig))
        return trig

    def act(self, *actions: Action) -> None:
        """Run actions now, as a trigger would (names, or callables taking the relay), in order."""
        self._call(lambda: [self._run_action(a) for a in actions])

    def disarm(self) -> None:
        self._call(self._triggers.clear)

    @property
    def open_connections(self) -> int:
        return len(self._pipes)

    def wait_for(self, predicate: Callable[["Relay"], bool], timeout: float = 30, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no {what} within {timeout:.0f}s; events: {self.describe()}")
            time.sleep(0.02)

    def describe(self, last: int = 20) -> str:
        return "; ".join(f"{t:.2f}s {text}" for t, text in self.events[-last:])

    def close(self) -> None:
        if self._closed:
            return
        self._call(lambda: self._do_cut(True))
        self._closed = True
        self._wake()
        self._thread.join(10)
        if self._listener is not None:
            self._listener.close()
        self._wake_r.close()
        self._wake_w.close()
        self._sel.close()

    def __enter__(self) -> "Relay":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the loop ------------------------------------------------------------------------------

    def _log(self, text: str) -> None:
        self.events.append((time.monotonic() - self._t0, text))

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _call(self, fn: Callable[[], object]) -> None:
        """Run `fn` in the relay's thread and wait for it (directly when already there)."""
        if threading.current_thread() is self._thread:
            fn()
            return
        if self._closed:
            raise RuntimeError(f"{self.name} is closed")
        done, err = threading.Event(), []  # type: ignore[var-annotated]
        self._calls.put((fn, done, err))
        self._wake()
        if not done.wait(10):
            raise TimeoutError(f"{self.name}: the relay thread did not answer")
        if err:
            raise err[0]

    def _loop(self) -> None:
        while not self._closed:
            self._sync_interest()
            for key, mask in self._sel.select(0.5):
                if key.data == "wake":
                    try:
                        self._wake_r.recv(4096)
                    except OSError:
                        pass
                elif key.data == "listen":
                    self._accept()
                else:
                    pipe, side = key.data
                    if pipe.number not in self._pipes:
                        continue
                    if mask & selectors.EVENT_READ:
                        self._read(pipe, side)
                    if pipe.number in self._pipes and mask & selectors.EVENT_WRITE:
                        self._write(pipe, DOWN if side == "client" else UP)
            while True:
                try:
                    fn, done, err = self._calls.get_nowait()
                except queue.Empty:
                    break
                try:
                    fn()
                except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                    err.append(exc)
                done.set()

    def _sync_interest(self) -> None:
        for pipe in list(self._pipes.values()):
            for side, sock in (("client", pipe.client), ("server", pipe.server)):
                if sock is None:
                    continue
                out_dir, in_dir = (UP, DOWN) if side == "client" else (DOWN, UP)  # we read out_dir from it
                mask = 0
                if not self.silent:
                    if not pipe.eof[out_dir] and len(pipe.buf[out_dir]) < BUFFER and pipe.dst(out_dir) is not None:
                        mask |= selectors.EVENT_READ
                    if pipe.buf[in_dir] and not pipe.shut[in_dir]:
                        mask |= selectors.EVENT_WRITE
                try:
                    key = self._sel.get_key(sock)
                    if mask == 0:
                        self._sel.unregister(sock)
                    elif key.events != mask:
                        self._sel.modify(sock, mask, (pipe, side))
                except KeyError:
                    if mask:
                        self._sel.register(sock, mask, (pipe, side))

    def _accept(self) -> None:
        if self._listener is None:
            return
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        client.setblocking(False)
        self.accepted += 1
        pipe = _Pipe(self.accepted, client)
        self._pipes[pipe.number] = pipe
        self._log(f"accepted #{pipe.number}" + (" (held: blackhole)" if self.silent else ""))
        if not self.silent:
            self._connect_upstream(pipe)

    def _connect_upstream(self, pipe: _Pipe) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError as exc:
            self._log(f"#{pipe.number}: upstream {self.upstream[1]} unreachable ({exc}): reset")
            self._drop(pipe, rst=True)
            return
        server.setblocking(False)
        for s in (pipe.client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe.server = server

    def _read(self, pipe: _Pipe, side: str) -> None:
        direction = UP if side == "client" else DOWN
        sock = pipe.src(direction)
        try:
            data = sock.recv(min(65536, BUFFER - len(pipe.buf[direction])))  # type: ignore[union-attr]
        except BlockingIOError:
            return
        except OSError as exc:
            self._log(f"#{pipe.number}: {side} error {exc.errno and errno.errorcode.get(exc.errno)}: reset")
            self._drop(pipe, rst=True)
            return
        if not data:
            pipe.eof[direction] = True
            self._log(f"#{pipe.number}: {side} closed its side")
        pipe.buf[direction] += data
        self._write(pipe, direction)

    def _write(self, pipe: _Pipe, direction: str) -> None:
        """Deliver what is buffered in `direction`, stopping exactly where a trigger fires."""
        while pipe.number in self._pipes and not self.silent and pipe.buf[direction]:
            dst = pipe.dst(direction)
            if dst is None:
                return
            limit = len(pipe.buf[direction])
            due = [t for t in self._triggers if t.direction in (direction, ANY)]
            if due:
                limit = min(limit, min(t.remaining() for t in due))
            sent = 0
            if limit > 0:
                try:
                    sent = dst.send(pipe.buf[direction][:limit])
                except BlockingIOError:
                    return
                except OSError as exc:
                    self._log(f"#{pipe.number}: send {direction} failed ({exc}): reset")
                    self._drop(pipe, rst=True)
                    return
                del pipe.buf[direction][:sent]
                self.bytes[direction] += sent
            for trig in due:
                trig.seen += sent
            for trig in [t for t in due if t.remaining() <= 0]:
                self._fire(trig)
            if sent == 0 and limit > 0:
                return
        if pipe.number in self._pipes and pipe.eof[direction] and not pipe.buf[direction] and not pipe.shut[direction]:
            dst = pipe.dst(direction)
            pipe.shut[direction] = True
            try:
                if dst is not None:
                    dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            if pipe.shut[UP] and pipe.shut[DOWN]:
                self._drop(pipe, rst=False)

    def _fire(self, trig: Trigger) -> None:
        if trig in self._triggers:
            self._triggers.remove(trig)
        self._log(f"trigger: {trig.name} (up {self.bytes[UP]}, down {self.bytes[DOWN]})")
        for act in trig.actions:
            self._run_action(act)
        trig.fired.set()

    def _run_action(self, act: Action) -> None:
        if callable(act):
            act(self)
        else:
            {"cut": lambda: self._do_cut(False), "reset": lambda: self._do_cut(True), "refuse": self._do_refuse,
             "blackhole": self._do_blackhole, "pass_through": self._do_pass}[act]()

    def _drop(self, pipe: _Pipe, rst: bool) -> None:
        self._pipes.pop(pipe.number, None)
        for sock in pipe.socks():
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            if rst:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            else:
                _drain(sock)  # a close with unread data would send an RST instead of the FIN
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            sock.close()

    # --- the actions (relay thread) ------------------------------------------------------------

    def _do_pass(self) -> None:
        self._log("pass through")
        self.silent = False
        if not self.accepting:
            self._listen(self.port)
        for pipe in list(self._pipes.values()):
            if pipe.server is None:
                self._connect_upstream(pipe)
            for direction in (UP, DOWN):
                self._write(pipe, direction)

    def _do_cut(self, rst: bool) -> None:
        self._log(f"cut {len(self._pipes)} connection(s)" + (" (reset)" if rst else ""))
        for pipe in list(self._pipes.values()):
            self._drop(pipe, rst=rst)

    def _do_refuse(self) -> None:
        self._log("refuse new connections")
        if self._listener is not None:
            self._sel.unregister(self._listener)
            self._listener.close()
            self._listener = None
        self.accepting = False

    def _do_blackhole(self) -> None:
        self._log("blackhole")
        self.silent = True
        if not self.accepting:
            self._listen(self.port)

    def _listen(self, port: int) -> None:
        """Listen on 127.0.0.1:port (the same port again after `refuse`)."""
        last: OSError | None = None
        for _ in range(50):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as exc:
                sock.close()
                last = exc
                time.sleep(0.1)
                continue
            sock.listen(64)
            sock.setblocking(False)
            self._listener = sock
            self._sel.register(sock, selectors.EVENT_READ, "listen")
            self.accepting = True
            return
        raise OSError(f"{self.name}: cannot listen on 127.0.0.1:{port} again: {last}")


def _act_name(act: Action) -> str:
    return act if isinstance(act, str) else getattr(act, "__name__", "call")


def _drain(sock: socket.socket) -> None:
    try:
        sock.setblocking(False)
        for _ in range(1024):
            if not sock.recv(65536):
                return
    except OSError:
        return
