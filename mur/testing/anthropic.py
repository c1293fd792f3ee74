"""A ModelClient speaking the Anthropic Messages API directly over httpx, for tests: the agent loop's
and the retry policy's tests drive it against the loopback model server (mur.testing.modelserver).

The runtime's `transport: http` goes through the driver component instead
(mur.inference.driver.DriverModelClient); both share mur.inference.provider.with_retries.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import httpx

from mur.inference.provider import ProviderError, RetryPolicy, parse_retry_after, with_retries

ANTHROPIC_VERSION = "2023-06-01"


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


class AnthropicClient:
    """A ModelClient over httpx: one non-streaming Messages request per `complete`, with retries."""

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
