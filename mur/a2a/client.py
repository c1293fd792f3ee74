"""A small synchronous A2A client (httpx) for ``mur send``, ``mur watch`` and ``mur cancel``.

Every failure to talk to the peer — connection refused, timeout, a non-JSON answer, an HTTP error
status, a JSON-RPC error — becomes ``MurError("E-A2A-001", ...)`` here, once; a 401 is
``E-A2A-002`` and an untrusted or unpinned certificate ``E-A2A-004``.

:class:`Credentials` is what a caller proves itself with (a bearer token) and how it checks the
server (a CA file, or the SHA-256 pin of the server's certificate, for self-signed deploy certs).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import ssl
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx

from mur.digits import digits_int
from mur.errors import MurError

WAITING_STATES = ("submitted", "working")
TASK_FRAMES = ("status", "artifact", "text", "thinking")
POLL_SECS = 0.2
TOKEN_HINT = "pass the capsule's token: --token, --token-file FILE or MURMUR_A2A_TOKEN (a deployed capsule's is beside its deployment record)"


@dataclass(frozen=True)
class Credentials:
    """A bearer token to send, and how to trust the server: ``cacert`` (a PEM CA or certificate
    file to verify against) or ``pin_sha256`` (64 lowercase hex: accept exactly the certificate
    whose DER form has this SHA-256, whoever signed it)."""

    token: str | None = None
    cacert: Path | None = None
    pin_sha256: str | None = None

    @property
    def tls(self) -> bool:
        return self.cacert is not None or self.pin_sha256 is not None


def parse_pin(text: str) -> str:
    """A SHA-256 fingerprint as 64 lowercase hex digits (colons and case as openssl prints them
    are accepted); ValueError otherwise."""
    pin = text.strip().lower().replace(":", "")
    if not re.fullmatch(r"[0-9a-f]{64}", pin):
        raise ValueError("a SHA-256 fingerprint is 64 hex digits (colons allowed)")
    return pin


def certificate_sha256(der: bytes) -> str:
    """The pin of a certificate: the SHA-256 of its DER form, 64 lowercase hex digits."""
    return hashlib.sha256(der).hexdigest()


class PinMismatch(ssl.SSLCertVerificationError):
    """The server's certificate is not the pinned one."""

    def __str__(self) -> str:
        return str(self.args[0])


class _PinnedSocket(ssl.SSLSocket):
    """Checks the pin inside the handshake, so no request byte (the token) reaches another server."""

    def do_handshake(self, block: bool = False) -> None:
        super().do_handshake(block)
        got = certificate_sha256(self.getpeercert(binary_form=True) or b"")
        if got != self.context.pin_sha256:  # type: ignore[attr-defined]
            raise PinMismatch(f"its sha256 is {got}, not the pinned {self.context.pin_sha256}")  # type: ignore[attr-defined]


def ssl_context(credentials: Credentials) -> ssl.SSLContext | bool:
    """What httpx verifies the server with; E-A2A-004 for an unreadable CA file."""
    if credentials.pin_sha256 is not None:
        # The pin replaces chain and name checks: a deploy's self-signed certificate has neither.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.sslsocket_class = _PinnedSocket
        ctx.pin_sha256 = credentials.pin_sha256  # type: ignore[attr-defined]
        return ctx
    if credentials.cacert is not None:
        try:
            return ssl.create_default_context(cafile=str(credentials.cacert))
        except (OSError, ssl.SSLError) as exc:
            raise MurError(
                "E-A2A-004", f"cannot use --cacert {credentials.cacert}: {getattr(exc, 'strerror', None) or exc}",
                hint="pass a PEM file holding the CA (or the server's own certificate)",
            ) from exc
    return True


def nodelay_transport(verify: ssl.SSLContext | bool = True) -> httpx.HTTPTransport:
    """An httpx transport with TCP_NODELAY: httpx writes a request's head and body separately,
    and Nagle + delayed ACK would otherwise add ~40 ms to every small request on a kept-alive
    connection."""
    return httpx.HTTPTransport(verify=verify, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])


def normalize_url(url: str, tls: bool = False) -> str:
    """``localhost:8080`` -> ``http://localhost:8080`` (what ``mur run`` prints has no scheme);
    ``https://`` instead when the caller brought TLS credentials."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = ("https://" if tls else "http://") + url
    return url


@dataclass
class SseEvent:
    event: str
    data: Any  # parsed JSON, or the raw string when it is not JSON
    id: int | None = None


def task_text(task: dict) -> str:
    """A task's answer: the ``response`` artifact, else the ``prompt`` one, else its status message."""
    for artifact in task.get("artifacts") or []:
        if artifact.get("name") in ("response", "prompt"):
            return "\n".join(p.get("text", "") for p in artifact.get("parts", []) if isinstance(p, dict))
    message = (task.get("status") or {}).get("message")
    if isinstance(message, dict):
        return "\n".join(p.get("text", "") for p in message.get("parts", []) if isinstance(p, dict))
    return message if isinstance(message, str) else ""


class A2AClient:
    """JSON-RPC calls and SSE streams against one capsule URL."""

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        credentials: Credentials | None = None,
        shown_as: str | None = None,
    ):
        credentials = credentials or Credentials()
        self.url = normalize_url(url, tls=credentials.tls)
        # what messages call the peer: the deployment id the user gave, not the local end of its SSH forward
        self.shown = shown_as or self.url
        headers = {"authorization": f"Bearer {credentials.token}"} if credentials.token else {}
        transport = transport or nodelay_transport(ssl_context(credentials))
        self._http = httpx.Client(timeout=timeout, transport=transport, headers=headers)
        self._next_id = 0

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "A2AClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fail(self, what: str) -> MurError:
        hint = ("is the capsule running? use the url `mur run` printed (murmur: url localhost:<port>)"
                if self.shown == self.url else f"is it running? `mur deploy status {self.shown}` checks it")
        return MurError("E-A2A-001", f"{self.shown}: {what}", hint=hint)

    def _unreachable(self, exc: httpx.HTTPError, what: str) -> MurError:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, ssl.SSLError):
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, ssl.SSLCertVerificationError):
            return MurError(
                "E-A2A-004",
                f"{self.shown}: the server's certificate is not trusted: {cause}",
                hint="pass --cacert FILE (its CA or certificate) or --pin-sha256 HEX (the fingerprint deploy printed)",
            )
        return self._fail(f"{what}: {exc}")

    def _refused(self, method: str, error: object) -> MurError:
        """A JSON-RPC error the capsule answered, with what to do about its kind."""
        from mur.a2a import protocol

        err = error if isinstance(error, dict) else {}
        hints = {
            protocol.TASK_NOT_FOUND: "use a task id `mur send` printed to this capsule (`mur send --json` "
                                     "shows it); a capsule that restarted has forgotten its earlier tasks",
            protocol.TASK_NOT_CANCELABLE: "the task has already ended: `mur send` or `mur watch --task ID` "
                                          "shows how",
            protocol.METHOD_NOT_FOUND: f"{self.shown} does not serve {method}: is it an A2A capsule "
                                       "(its agent card is at /.well-known/agent-card.json)?",
        }
        return MurError("E-A2A-001", f"{self.shown}: {method} failed: {err.get('code')} {err.get('message')}",
                        hint=hints.get(err.get("code")))  # type: ignore[call-overload]

    def _check_status(self, response: httpx.Response, method: str) -> None:
        if response.status_code == 401:
            raise MurError(
                "E-A2A-002",
                f"{self.shown}: {method} refused: the capsule needs a bearer token"
                + (" and this one is wrong" if "authorization" in self._http.headers else ""),
                hint=TOKEN_HINT,
            )
        if response.status_code != 200:
            raise self._fail(f"HTTP {response.status_code} for {method}")

    def _envelope(self, method: str, params: dict) -> dict:
        self._next_id += 1
        return {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}

    def call(self, method: str, params: dict) -> Any:
        """One JSON-RPC call; returns ``result``."""
        try:
            response = self._http.post(self.url + "/", json=self._envelope(method, params))
        except httpx.HTTPError as exc:
            raise self._unreachable(exc, "cannot reach the capsule") from exc
        self._check_status(response, method)
        try:
            body = response.json()
        except ValueError as exc:
            raise self._fail(f"answered {method} with something that is not JSON") from exc
        if not isinstance(body, dict):
            raise self._fail(f"answered {method} with something that is not a JSON-RPC response")
        if "error" in body:
            raise self._refused(method, body["error"])
        return body.get("result")

    def send(self, text: str, context_id: str | None = None) -> dict:
        """``message/send`` one text message; returns the task it created (or the one it answered)."""
        message: dict[str, Any] = {
            "kind": "message",
            "messageId": f"msg_{uuid.uuid4().hex}",
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        }
        if context_id:
            message["contextId"] = context_id
        return self._task("message/send", {"message": message})

    def get_task(self, task_id: str) -> dict:
        """``tasks/get``."""
        return self._task("tasks/get", {"id": task_id})

    def cancel_task(self, task_id: str) -> dict:
        """``tasks/cancel``: a queued task or one waiting for input ends ``canceled``."""
        return self._task("tasks/cancel", {"id": task_id})

    def _task(self, method: str, params: dict) -> dict:
        result = self.call(method, params)
        if not isinstance(result, dict) or not isinstance(result.get("status"), dict) or "id" not in result:
            raise self._fail(f"answered {method} with something that is not a task")
        return result

    def wait(self, task_id: str, timeout: float | None, poll: float = POLL_SECS) -> dict:
        """Poll ``tasks/get`` until the task is terminal or input-required."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            task = self.get_task(task_id)
            if task.get("status", {}).get("state") not in WAITING_STATES:
                return task
            if deadline is not None and time.monotonic() >= deadline:
                raise MurError(
                    "E-A2A-001",
                    f"timed out after {timeout:g}s waiting for task {task_id}",
                    hint=f"follow it with: mur watch {self.shown} --task {task_id}",
                )
            time.sleep(poll)

    def stream(self, method: str, params: dict, last_event_id: int | None = None) -> Iterator[SseEvent]:
        """Open an SSE method (``stream/watch``, ``message/stream``) and yield its events."""
        headers = {"accept": "text/event-stream"}
        if last_event_id is not None:
            headers["last-event-id"] = str(last_event_id)
        try:
            with self._http.stream(
                "POST",
                self.url + "/",
                json=self._envelope(method, params),
                headers=headers,
                timeout=httpx.Timeout(10.0, read=None),
            ) as response:
                self._check_status(response, method)
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    try:
                        body = json.loads(response.read() or b"{}")
                    except ValueError as exc:
                        raise self._fail(f"answered {method} with neither a stream nor JSON") from exc
                    raise self._refused(method, body.get("error") if isinstance(body, dict) else None)
                yield from _parse_sse(response.iter_lines())
        except httpx.HTTPError as exc:
            raise self._unreachable(exc, "stream broke") from exc


    def watch(self, task_id: str | None = None) -> Iterator[SseEvent]:
        """``stream/watch`` from the start of the buffer; with ``task_id`` only that task's frames,
        ending after its final status. A watcher cut off for lagging reconnects where it was."""
        last = 0
        while True:
            lagged = False
            for ev in self.stream("stream/watch", {}, last_event_id=last):
                if ev.id is not None:
                    last = ev.id
                data = ev.data if isinstance(ev.data, dict) else {}
                if task_id and ev.event in TASK_FRAMES and data.get("id") != task_id:
                    continue
                yield ev
                if ev.event == "lagged":
                    lagged = True
                    break
                if ev.event == "capsule-closed":
                    return
                if task_id and ev.event == "status" and data.get("final") is True:
                    return
            if not lagged:
                return


def send_task(
    url: str,
    text: str,
    context_id: str | None = None,
    timeout: float | None = 300.0,
    credentials: Credentials | None = None,
    shown_as: str | None = None,
) -> dict:
    """Send ``text`` and wait for the task to end (or ask for input); returns the task as tasks/get shows it.

    A rejected task is returned as message/send answered it.
    """
    with A2AClient(url, credentials=credentials, shown_as=shown_as) as client:
        task = client.send(text, context_id)
        if task.get("status", {}).get("state") not in WAITING_STATES:
            return task
        return client.wait(task["id"], timeout)


def _parse_sse(lines: Iterator[str]) -> Iterator[SseEvent]:
    event, data, event_id = "message", [], None
    for line in lines:
        if line == "":
            if data:
                raw = "\n".join(data)
                try:
                    parsed: Any = json.loads(raw)
                except ValueError:
                    parsed = raw
                yield SseEvent(event, parsed, event_id)
            event, data, event_id = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                event_id = digits_int(value)
