"""`murmur:http/outbound@0.1.0`: the only way a guest reaches the network.

Every request URL is checked against the guest's effective allow list (capabilities.network.allow,
narrowed by the artifact's own grant) before any connection is made; the check is a pattern match
on the URL and never resolves DNS. A refusal reaches the guest as ``err("network policy: ...")``.
Every attempt, allowed or not, is reported to ``on_http`` for the trace.

Redirects are not followed (a hop to another host would bypass the check; the guest sees the 3xx
and may request the Location, which is checked again). The host's proxy settings are ignored
(``trust_env=False``): the allow list names the destination, not a proxy. Responses are capped at
MAX_RESPONSE_BYTES; the timeout is the guest's (default DEFAULT_TIMEOUT) capped by what is left of
the calling guest's deadline, less REPLY_MARGIN (`time_left`): a request that cannot finish fails
while the guest still has time to handle the failure, instead of racing the deadline's interrupt.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from mur.manifest.network import AllowEntry, url_allowed

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
DEFAULT_TIMEOUT = 30.0
REPLY_MARGIN = 0.25  # seconds of a guest's deadline kept for it to handle a request that timed out
MIN_TIMEOUT = 0.05
# Headers the host owns: letting a guest set them would let it lie about framing.
_HOST_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade"}


def _redact(url: str) -> str:
    """The URL without user info (never traced)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def time_left(deadline_at: float | None) -> float | None:
    """Seconds a request of a guest whose deadline is `deadline_at` may take (None: no deadline):
    what is left of it less REPLY_MARGIN, at least MIN_TIMEOUT. The guest blocks in the host while
    it waits, where the deadline's interrupt cannot reach it; a timeout that ended at the deadline
    itself would leave the guest no time to act on the failure before being interrupted."""
    if deadline_at is None:
        return None
    return max(MIN_TIMEOUT, deadline_at - time.monotonic() - REPLY_MARGIN)


class OutboundHttp:
    """The allow-listed HTTP client behind one guest call."""

    def __init__(
        self,
        allow: list[AllowEntry],
        *,
        on_http: Callable[[dict], None] | None = None,
        transport: Any = None,
        deadline_at: float | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ):
        self.allow = list(allow)
        self.on_http = on_http
        self.transport = transport
        self.deadline_at = deadline_at
        self.max_response_bytes = max_response_bytes

    def report(self, event: dict) -> None:
        """Tell `on_http` about one attempt (also wasi:http's, mur.wasm.wasi_http)."""
        if self.on_http is not None:
            try:
                self.on_http(event)
            except Exception:  # a broken trace sink must not change what the guest sees
                pass

    def _timeout(self, timeout_ms: int | None) -> float:
        timeout = DEFAULT_TIMEOUT if not timeout_ms else timeout_ms / 1000.0
        left = time_left(self.deadline_at)
        return timeout if left is None else min(timeout, left)

    def send(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None,
             timeout_ms: int | None = None) -> dict | str:
        """Perform one request. Returns a response dict, or an error string for the guest."""
        import httpx

        method = (method or "").upper()
        shown = _redact(url)
        event: dict[str, Any] = {"url": shown, "method": method}
        if method not in METHODS:
            event.update(allowed=False, error=f"unsupported method '{method}'")
            self.report(event)
            return f"unsupported method '{method}' (use one of {', '.join(METHODS)})"
        if not url_allowed(self.allow, url):
            reason = f"network policy: '{shown}' not in capabilities.network.allow"
            event.update(allowed=False, error=reason)
            self.report(event)
            return reason
        event["allowed"] = True
        send_headers = [(k, v) for k, v in headers if k.lower() not in _HOST_HEADERS]
        started = time.monotonic()
        try:
            with httpx.Client(transport=self.transport, follow_redirects=False, trust_env=False,
                              timeout=self._timeout(timeout_ms)) as client:
                request = client.build_request(method, url, headers=send_headers, content=body)
                response = client.send(request, stream=True)
                try:
                    chunks, size = [], 0
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > self.max_response_bytes:
                            raise _TooLarge()
                        chunks.append(chunk)
                finally:
                    response.close()
        except _TooLarge:
            error = f"response body exceeds {self.max_response_bytes} bytes"
            event.update(error=error, duration_ms=int((time.monotonic() - started) * 1000))
            self.report(event)
            return error
        except (httpx.HTTPError, httpx.InvalidURL, ValueError, TypeError, UnicodeError) as exc:
            error = f"http error: {type(exc).__name__}: {exc}"
            event.update(error=error, duration_ms=int((time.monotonic() - started) * 1000))
            self.report(event)
            return error
        event.update(status=response.status_code, duration_ms=int((time.monotonic() - started) * 1000))
        self.report(event)
        return {
            "status": response.status_code,
            "headers": [(k, v) for k, v in response.headers.multi_items()],
            "body": b"".join(chunks),
        }


class _TooLarge(Exception):
    pass
