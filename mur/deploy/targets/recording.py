"""A Target that records what it is asked to do and answers from a script: deploy sequences are
unit-tested as data (kamal's Printer backend is the model), without a machine.

    t = RecordingTarget(home="/home/deployer", uid=1000)
    t.on("uname", stdout="Linux\\nx86_64\\n")          # by the label the caller gives (`what=`)
    t.on("service status", lambda call: Result(0, state_json(), ""))
    ... run a provider against t ...
    assert t.labels() == ["uname", "sudo check", ...]

`open_port` serves a small loopback HTTP stand-in for the service (`t.service`): its agent card
while `up`, and a bearer-token check on POST, so health checks run their real code.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator, Union

from mur.deploy.targets.base import Held, Result, Target


@dataclass(frozen=True)
class Call:
    kind: str  # "run" | "put" | "hold" | "connect"
    what: str
    cmd: str = ""
    sudo: bool = False
    dst: str = ""
    mode: int = 0


Responder = Union[Result, Callable[[Call], Result]]


class FakeService:
    """A loopback HTTP server standing in for `mur run`'s A2A endpoint."""

    def __init__(self) -> None:
        self.up = False
        self.token: str | None = None
        self.requests: list[tuple[str, str | None]] = []  # (method, Authorization header)
        svc = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                svc.requests.append(("GET", self.headers.get("authorization")))
                if not svc.up:
                    self._send(503, b"{}")
                    return
                self._send(200, json.dumps({"name": "fake", "securitySchemes": {}}).encode())

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length") or 0))
                auth = self.headers.get("authorization")
                svc.requests.append(("POST", auth))
                ok = svc.token is None or auth == f"Bearer {svc.token}"
                self._send(200 if ok else 401, b'{"jsonrpc":"2.0","id":"x","result":{}}')

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeHeld(Held):
    """The lock holder as the target would run it: `@@locked`, then answers to u/r, until closed."""

    def __init__(self, target: "RecordingTarget", cmd: str):
        self.t, self.cmd = target, cmd
        self.lines: list[str] = []
        self.sent: list[bytes] = []
        self._closed = False
        if target.lock_holder is not None:
            self.lines.append(f"@@busy 1000 {target.lock_holder}\n")
            self._closed = True
        else:
            prev = target.lock_previous
            self.lines.append(f"@@locked {prev}\n" if prev else "@@locked \n")
            target.locks_held += 1
            import re

            token = re.search(r'"token": "([0-9a-f]+)"', cmd)  # what this holder writes in the holder file
            target.lock_previous = '1000 {"token": "%s"}' % (token.group(1) if token else "")

    def readline(self, timeout: float) -> str | None:
        return self.lines.pop(0) if self.lines else ("" if self._closed else None)

    def send(self, data: bytes) -> bool:
        if self._closed:
            return False
        self.sent.append(data)
        answer = {b"u": "@@unshared\n", b"r": "@@removed\n"}.get(data)
        if answer:
            self.lines.append(answer)
        if data == b"r":
            self.t.lock_files_removed += 1
        return True

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.t.locks_held -= 1


class RecordingTarget(Target):
    kind = "recording"

    def __init__(self, *, home: str = "/home/deployer", uid: int = 1000, user: str = "deployer",
                 label: str = "deployer@vm") -> None:
        super().__init__()
        self.sent: list[str] = []
        self._home, self._uid, self._user, self._label = home, uid, user, label
        self.calls: list[Call] = []
        self.files: dict[str, bytes] = {}
        self._rules: list[tuple[str, Responder]] = []
        self._what = ""
        self.service = FakeService()
        self.ssh_user, self.host, self.port, self.key_file = user, "vm", 22, None
        # the deployment lock as the target holds it (mur.deploy.lock)
        self.lock_holder: str | None = None  # another command holds it: "<since> <holder json>"
        self.lock_previous = ""  # the holder file an acquisition finds
        self.locks_held = 0
        self.lock_files_removed = 0
        self.holds: list[FakeHeld] = []
        self.is_alive = True
        self.reconnects = 0

    @property
    def label(self) -> str:
        return self._label

    def on(self, what: str, response: Responder | None = None, *, stdout: str = "", rc: int = 0,
           stderr: str = "") -> None:
        """Answer commands labelled `what` (later rules win); a callable sees the call."""
        self._rules.append((what, response if response is not None else Result(rc, stdout, stderr)))

    def run(self, cmd: str, *, sudo: bool = False, check: bool = True, timeout: float | None = None,
            stdin: bytes | None = None, what: str = "", helper: tuple[str, ...] = (), first: str = "") -> Result:
        self.calls.append(Call("run", what, f"{first} && {cmd}" if first else cmd, sudo and not self.is_root))
        self._what = what
        return super().run(cmd, sudo=sudo, check=check, timeout=timeout, stdin=stdin, what=what, helper=helper,
                           first=first)

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None) -> Result:
        self.sent.append(cmd)  # as it goes over the wire: elevated
        for what, response in reversed(self._rules):
            if what == self._what:
                return response(self.calls[-1]) if callable(response) else response
        return Result(0, "", "")

    def put_file(self, src: Path | bytes, dst: str, mode: int = 0o644, scratch: str | None = None) -> None:
        call = Call("put", f"install {dst}", dst=dst, mode=mode)
        self.calls.append(call)
        for what, response in reversed(self._rules):
            if what == "put" and callable(response):
                response(call)  # may raise: an interrupt, a dropped connection
                break
        self.files[dst] = src if isinstance(src, bytes) else Path(src).read_bytes()

    def hold(self, cmd: str) -> Held:
        self.calls.append(Call("hold", "lock", cmd))
        held = FakeHeld(self, cmd)
        self.holds.append(held)
        return held

    def alive(self, timeout: float = 3.0) -> bool:
        return self.is_alive

    def reconnect(self, budget: float | None = None) -> None:
        self.reconnects += 1
        self.is_alive = True
        self.calls.append(Call("connect", "reconnect"))

    @contextlib.contextmanager
    def open_port(self, port: int) -> Iterator[tuple[str, int]]:
        yield "127.0.0.1", self.service.port

    def tunnel_command(self, remote_port: int, local_port: int) -> str:
        return f"ssh -N -L {local_port}:127.0.0.1:{remote_port} {self.ssh_user}@{self.host}"

    def close(self) -> None:
        pass

    def labels(self, kind: str = "run") -> list[str]:
        return [c.what for c in self.calls if c.kind == kind]
