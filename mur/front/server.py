"""`mur front run --config DIR/front.json`: the front process (foreground; logs to stderr).

It takes the listening socket over from a front already serving there (mur.front.handoff), or binds
it; serves until SIGTERM; reloads front.json on SIGHUP and when its modification time changes. A
configuration whose active backend changed is applied only once that backend answers its agent card
within `switch_wait` (else state.json carries the error and the previous backends keep serving). On
SIGTERM it stops accepting, lets the requests under way finish (up to STOP_GRACE) and exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from mur import __version__ as VERSION  # what state.json says runs (a deploy of another runtime replaces it)
from mur.aio import wait_for
from mur.front import handoff, http
from mur.front.config import CONTROL_NAME, STATE_NAME, TASKS_NAME, ConfigError, FrontConfig, load, read_state, write_json
from mur.front.proxy import Front, server_tls

POLL = 0.5
STOP_GRACE = 30.0
STATE_EVERY = 1.0


def _log(text: str) -> None:
    sys.stderr.write(f"[mur front {time.strftime('%Y-%m-%dT%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


async def card_answers(front: Front, port: int, wait: float) -> str | None:
    """None when 127.0.0.1:`port` answers its agent card within `wait` seconds, else why not."""
    from mur.front.config import Backend

    probe = Backend("probe", port)
    deadline = time.monotonic() + wait
    why = "no answer"
    while True:
        try:
            reader, writer = await wait_for(front.open_backend(probe), 5.0)
            try:
                writer.write(http.render_head("GET /.well-known/agent-card.json HTTP/1.1",
                                              [("host", f"127.0.0.1:{front.cfg.listen_port}"), ("connection", "close")]))
                await writer.drain()
                head = await wait_for(http.read_head(reader), 5.0)
                status = http.status_of(head) if head else 0
                if status == 200:
                    return None
                why = f"agent card: HTTP {status}"
            finally:
                writer.close()
        except (OSError, asyncio.TimeoutError, http.BadMessage) as exc:
            why = str(exc) or type(exc).__name__
        if time.monotonic() >= deadline:
            return why
        await asyncio.sleep(0.2)


def cert_pin(path: str | None) -> str | None:
    """SHA-256 of the certificate's DER form (what clients pin)."""
    if not path:
        return None
    import hashlib
    import ssl

    try:
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(Path(path).read_text())).hexdigest()
    except (OSError, ValueError):
        return None


class FrontProcess:
    def __init__(self, config_path: Path, on_serving: Callable[[], None] = lambda: None,
                 on_stopped: Callable[[], None] = lambda: None):
        self.on_serving, self.on_stopped = on_serving, on_stopped
        self.path = config_path
        self.dir = config_path.parent
        self.front: Front | None = None
        self.server: asyncio.base_events.Server | None = None
        self.error: str | None = None
        self.applied = 0
        self.mtime = 0.0
        self.stopping = asyncio.Event()
        self.reload_now = asyncio.Event()
        self.state_dirty = True
        self.handed_off = False
        self.tls_pin: str | None = None  # the certificate this process serves (loaded once, at start)
        self.last_counts: dict[str, int] = {}

    # --- state.json -----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        f = self.front
        assert f is not None
        backends = []
        for b in f.cfg.backends:
            entry: dict[str, Any] = {"name": b.name, "port": b.port, "role": b.role, "inflight": f.inflight.get(b.name, 0)}
            if b.name in f.drains:
                entry.update(f.drains[b.name].to_dict())
            backends.append(entry)
        return {"pid": os.getpid(), "generation": self.applied, "error": self.error, "listen_port": f.cfg.listen_port,
                "backends": backends, "cached_tasks": len(f.book.cached), "known_tasks": len(f.book.owner),
                "connections": f.connections, "counts": dict(f.counts), "handed_off": self.handed_off,
                "version": VERSION, "tls_pin": self.tls_pin, "updated": time.time()}

    def save_tasks(self) -> None:
        """tasks.json: the finished tasks the front answers for (a restarted or successor front reads it)."""
        assert self.front is not None
        self.front.book.changed = False
        try:
            write_json(self.dir / TASKS_NAME, self.front.book.saved())
        except OSError as exc:
            _log(f"cannot write {TASKS_NAME}: {exc}")

    def load_tasks(self) -> None:
        assert self.front is not None
        self.front.book.restore(read_state(self.dir / TASKS_NAME))
        self.front.book.changed = False

    def write_state(self) -> None:
        try:
            write_json(self.dir / STATE_NAME, self.state())
        except OSError as exc:
            _log(f"cannot write state.json: {exc}")

    # --- configuration --------------------------------------------------------------------------------

    async def reload(self) -> None:
        try:
            self.mtime = self.path.stat().st_mtime
            cfg = load(self.path)
        except (ConfigError, OSError) as exc:
            self.error = str(exc)
            _log(f"keeping the current configuration: {exc}")
            self.write_state()
            return
        front = self.front
        assert front is not None
        if cfg.generation == self.applied:
            return
        new, old = cfg.active, front.cfg.active
        if new is not None and (old is None or (new.name, new.port) != (old.name, old.port)):
            why = await card_answers(front, new.port, cfg.switch_wait)
            if why is not None:
                self.error = f"generation {cfg.generation} refused: backend {new.name} (port {new.port}) does not answer: {why}"
                _log(self.error)
                self.write_state()
                return
        front.apply(cfg)
        self.applied, self.error = cfg.generation, None
        _log(f"generation {cfg.generation}: " + ", ".join(f"{b.name}:{b.port} {b.role}" for b in cfg.backends))
        self.write_state()

    async def watch(self) -> None:
        last_state = 0.0
        while not self.stopping.is_set():
            try:
                await wait_for(self.reload_now.wait(), POLL)
            except asyncio.TimeoutError:
                pass
            self.reload_now.clear()
            try:
                changed = self.path.stat().st_mtime != self.mtime
            except OSError:
                changed = False
            if changed:
                await self.reload()
            if self.front and self.front.book.changed:
                self.save_tasks()
            counts = dict(self.front.counts) if self.front else {}
            if counts != self.last_counts and time.monotonic() - last_state > STATE_EVERY:
                self.state_dirty, self.last_counts = True, counts
            if self.state_dirty or (self.front and self.front.drains and time.monotonic() - last_state > STATE_EVERY):
                self.state_dirty = False
                last_state = time.monotonic()
                self.write_state()

    # --- sockets --------------------------------------------------------------------------------------

    def listening(self, cfg: FrontConfig):  # noqa: ANN201 - (socket, control connection to release, old pid)
        taken = handoff.take_over(self.dir / CONTROL_NAME)
        if taken is not None:
            sock, conn, old_pid = taken
            _log(f"took the listening socket over from front {old_pid}")
            return sock, conn
        return handoff.listen(cfg.listen_host, cfg.listen_port), None

    def control_loop(self, control, listening, loop: asyncio.AbstractEventLoop) -> None:  # noqa: ANN001
        """Serve successors on the control socket (a thread: it blocks)."""
        while True:
            try:
                conn, _ = control.accept()
            except OSError:
                return

            def stop_accepting() -> None:
                done = threading.Event()
                loop.call_soon_threadsafe(lambda: (self._stop_accepting(), self.save_tasks(), done.set()))
                done.wait(10)

            if handoff.serve_one(conn, listening, stop_accepting):
                self.handed_off = True
                _log("handed the listening socket to a new front; finishing the connections under way")
                loop.call_soon_threadsafe(self.stopping.set)
                control.close()
                return

    def _stop_accepting(self) -> None:
        if self.server is not None:
            self.server.close()
        if self.front is not None and not self.front.closing:
            self.front.closing = time.monotonic()

    async def main(self) -> int:
        try:
            cfg = load(self.path)
        except ConfigError as exc:
            _log(f"cannot start: {exc}")
            return 2
        self.front = Front(cfg, report=self._dirty, log=_log)
        self.mtime = self.path.stat().st_mtime
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload_now.set)
        try:
            sock, predecessor = self.listening(cfg)
        except OSError as exc:
            _log(f"cannot listen on {cfg.listen_host}:{cfg.listen_port}: {exc}")
            return 1
        self.server = await asyncio.start_server(self.front.handle, sock=sock, ssl=server_tls(cfg),
                                                 limit=http.MAX_HEAD)
        self.tls_pin = cert_pin(cfg.tls_cert)
        self.applied = cfg.generation
        self.front.apply(cfg)
        control = handoff.control_socket(self.dir / CONTROL_NAME)
        control_ino = os.stat(self.dir / CONTROL_NAME).st_ino
        threading.Thread(target=self.control_loop, args=(control, sock, loop), daemon=True).start()
        self.load_tasks()
        if predecessor is not None:
            await loop.run_in_executor(None, handoff.release, predecessor)
            self.load_tasks()  # what the predecessor knew when it stopped accepting
        _log(f"serving {cfg.listen_host}:{cfg.listen_port} (pid {os.getpid()})")
        self.on_serving()
        self.write_state()
        watcher = asyncio.create_task(self.watch())
        await self.stopping.wait()
        watcher.cancel()
        self._stop_accepting()
        deadline = time.monotonic() + STOP_GRACE
        while self.front.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if not self.handed_off:
            self.save_tasks()
            control.close()
            try:  # only our own socket file: a successor may have renamed its own over it
                if os.stat(self.dir / CONTROL_NAME).st_ino == control_ino:
                    os.unlink(self.dir / CONTROL_NAME)
            except OSError:
                pass
            self.write_state()
        self.on_stopped()
        _log("stopped")
        return 0

    def _dirty(self) -> None:
        self.state_dirty = True


def run(config_path: str | Path, on_serving: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None) -> int:
    """Serve until SIGTERM; `on_serving` runs once the address is held, `on_stopped` at the end."""
    return asyncio.run(FrontProcess(Path(config_path).resolve(), on_serving, on_stopped).main())
