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

import time
from dataclasses import dataclass
from typing import Any, Callable

from mur.errors import MurError

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
RETRYABLE_KINDS = frozenset({"timeout", "connection"})


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


def failure_hint(error: ProviderError) -> str:
    """What to check for a provider call that failed for good, by how it failed."""
    if error.kind == "connection":
        return ("nothing answers at the provider's address: check inference.base_url (a capsule from "
                "`mur new agent` needs the loopback model server it printed running)")
    if error.kind == "timeout":
        return "the provider did not answer in time: check the network to it, or try again"
    if error.kind == "policy":
        return "capabilities.network.allow must admit the provider's host"
    if error.kind == "malformed":
        return "the reply is not the Messages API's: check that inference.base_url is an Anthropic-compatible endpoint"
    if error.kind == "http" and error.status in (401, 403):
        return "the provider refused the credentials: check the API key the capsule passes (capabilities.env.allow)"
    if error.kind == "http" and error.status == 404:
        return "check inference.model and inference.base_url"
    if error.kind == "http" and error.status in RETRYABLE_STATUSES:
        return "the provider is failing or rate limiting: try again later"
    if error.kind == "http":
        return "the provider refused the request: its message says why"
    return "the driver component failed: `mur trace show` has the session's events"


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
                    failure_hint(error),
                ) from error
            wait = policy.delay(attempt, error)
            if on_retry:
                on_retry(attempt + 1, error, wait)
            sleep(wait)
            attempt += 1
