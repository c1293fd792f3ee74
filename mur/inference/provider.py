"""Provider failures and the retry policy shared by every ModelClient.

A provider call ends in a Messages response or a :class:`ProviderError`. Which errors are worth
another attempt:

==========================  =========  ===============================================
failure                     retried    why
==========================  =========  ===============================================
HTTP 429, 529               yes        rate limited / overloaded; ``retry-after`` honoured
HTTP 408, 500, 502-504      yes        transient server-side failure
timeout, connection error   yes        transient network failure
HTTP 400, 401, 403, 404...  no         the same request fails the same way again
malformed reply (bad JSON)  no         a broken provider is not fixed by asking again
network policy refusal      no         capabilities.network.allow decides, not timing
==========================  =========  ===============================================

Backoff is exponential (``base_delay * 2**attempt``, capped at ``max_delay``); a ``retry-after``
from the provider replaces it (capped at ``max_retry_after``). After the last attempt the client
raises ``MurError("E-RUN-016", ...)`` carrying the provider's own message; the agent loop turns that
into a failed session, never a crash.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from mur.errors import MurError

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
RETRYABLE_KINDS = frozenset({"timeout", "connection"})
ANTHROPIC_VERSION = "2023-06-01"


class ProviderError(Exception):
    """One failed provider call: `kind` is http | timeout | connection | malformed | policy | driver."""

    def __init__(self, kind: str, message: str, *, status: int | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        if self.kind == "http":
            return self.status in RETRYABLE_STATUSES
        return self.kind in RETRYABLE_KINDS

    def describe(self) -> str:
        return f"HTTP {self.status}: {self.message}" if self.status else self.message


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed provider call is retried."""

    max_retries: int = 3
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, error: ProviderError) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        if error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_retry_after)
        return min(self.base_delay * (2 ** attempt), self.max_delay)


def parse_retry_after(value: str | None) -> float | None:
    """A `retry-after` header (delta-seconds) as seconds, or None."""
    if value is None:
        return None
    try:
        return max(0.0, float(str(value).strip()))
    except ValueError:
        return None  # an HTTP-date: fall back to our own backoff


def provider_message(body: bytes | str) -> str:
    """The human message from an Anthropic error body (`error.type: error.message`), else the text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:500] or "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return f"{error.get('type', 'error')}: {error['message']}"
    return text.strip()[:500]


def with_retries(call: Callable[[], dict[str, Any]], policy: RetryPolicy, *,
                 sleep: Callable[[float], None] = time.sleep,
                 on_retry: Callable[[int, ProviderError, float], None] | None = None) -> dict[str, Any]:
    """Run `call` until it returns, retrying retryable ProviderErrors; E-RUN-016 at the end."""
    attempt = 0
    while True:
        try:
            return call()
        except ProviderError as error:
            if not error.retryable or attempt >= policy.max_retries:
                tries = attempt + 1
                raise MurError(
                    "E-RUN-016",
                    f"inference provider failed: {error.describe()}"
                    + (f" (after {tries} attempts)" if tries > 1 else ""),
                ) from error
            wait = policy.delay(attempt, error)
            if on_retry:
                on_retry(attempt + 1, error, wait)
            sleep(wait)
            attempt += 1


class AnthropicClient:
    """A ModelClient speaking the Messages API directly over httpx (tests, host-side tooling).

    The runtime's ``transport: http`` goes through the driver component instead
    (:class:`mur.inference.driver.DriverModelClient`); both share :func:`with_retries`.
    """

    def __init__(self, endpoint: str, api_key: str | None = None, *, timeout: float = 600.0,
                 policy: RetryPolicy = RetryPolicy(), transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.url = endpoint.rstrip("/") + "/v1/messages"
        self.policy = policy
        self.sleep = sleep
        headers = {"anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
        if api_key:
            headers["x-api-key"] = api_key
        self._http = httpx.Client(headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST one non-streaming Messages request, with retries."""
        body = {**request, "stream": False}
        return with_retries(lambda: self._once(body), self.policy, sleep=self.sleep)

    def _once(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._http.post(self.url, json=body)
        except httpx.TimeoutException as exc:
            raise ProviderError("timeout", f"request to {self.url} timed out") from exc
        except httpx.HTTPError as exc:
            raise ProviderError("connection", f"request to {self.url} failed: {exc}") from exc
        if response.status_code >= 400:
            raise ProviderError("http", provider_message(response.content), status=response.status_code,
                                retry_after=parse_retry_after(response.headers.get("retry-after")))
        try:
            data = response.json()
        except ValueError as exc:
            raise ProviderError("malformed", f"malformed provider response (not JSON): "
                                             f"{response.text[:200]!r}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise ProviderError("malformed", f"malformed provider response: {response.text[:200]!r}")
        return data
