"""The host side of ``transport: http``: hand a WASM driver the request, read the provider's reply.

The driver is an artifact with ``runtime: driver`` exporting ``murmur:tool/run``. Each inference
turn the runtime calls it once with the driver wire payload (:mod:`mur.inference.messages`) as
``tool-input.data``; the driver reads its configuration from WASI environment variables
(:func:`driver_env`, the spec's "Inference config and the driver" table), sends the request to the
provider through the host's allow-listed HTTP import and answers with the reply in
``tool-result.data`` — or, on failure, ``status: error`` and the provider's message.

:class:`DriverModelClient` adapts that to the agent loop's ``ModelClient``: it converts the request,
calls the component through a ``call_driver`` callable supplied by the session runtime
(``lambda data: wasm_host.call_tool(driver_config, ToolInput(data=data))``), converts the reply back,
and applies the retry policy of :mod:`mur.inference.provider`.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from mur.inference.continuation import KEY
from mur.inference.messages import estimate_tokens, from_driver_reply, to_driver_payload
from mur.inference.provider import ProviderError, RetryPolicy, parse_retry_after, with_retries

def driver_env(inference: Any | None, api_key: str | None = None) -> dict[str, str]:
    """The MURMUR_INFERENCE_* variables for a driver (and every hook) WASI env, per the spec table.

    `api_key` is the resolved ``inference.api_key`` (``LoadedCapsule.api_key``); it is only set
    for ``transport: http`` and only when configured.
    """
    if inference is None:
        return {}
    transport = getattr(inference, "transport", "http")
    env = {
        "MURMUR_INFERENCE_TRANSPORT": transport,
        "MURMUR_INFERENCE_MODEL": getattr(inference, "model", "") or "",
        "MURMUR_INFERENCE_ENDPOINT": "",
        "MURMUR_INFERENCE_DRIVER": "",
    }
    if transport != "http":
        return env
    env["MURMUR_INFERENCE_ENDPOINT"] = (getattr(inference, "endpoint", None) or "").rstrip("/")
    artifact = getattr(inference, "driver_artifact", None)
    env["MURMUR_INFERENCE_DRIVER"] = artifact or ""
    driver = getattr(inference, "driver", None) or getattr(inference, "provider", None)
    config = getattr(driver, "config", None) if driver is not None else None
    if config is not None:
        env["MURMUR_INFERENCE_DRIVER_CONFIG"] = json.dumps(config, separators=(",", ":"))
    if api_key:
        env["MURMUR_INFERENCE_API_KEY"] = api_key
    return env


def _status_name(result: Any) -> str:
    status = getattr(result, "status", "error")
    for attr in ("name", "value"):
        inner = getattr(status, attr, None)
        if isinstance(inner, str):
            status = inner
            break
    return str(status).lower()


def _error_from_reply(reply: dict[str, Any], fallback: str) -> ProviderError:
    message = str(reply.get("error") or fallback or "driver returned an error")
    status = reply.get("status")
    status = status if isinstance(status, int) and status > 0 else None
    kind = str(reply.get("kind") or ("http" if status else "driver"))
    retry_after = reply.get("retry_after")
    return ProviderError(kind, message, status=status,
                         retry_after=parse_retry_after(None if retry_after is None else str(retry_after)))


def parse_driver_result(result: Any, payload_json: str) -> dict[str, Any]:
    """A driver's ToolResult -> an Anthropic-shaped response, or raise ProviderError."""
    data = getattr(result, "data", None)
    summary = getattr(result, "summary", None)
    raw = data if data is not None else summary
    reply: Any = None
    if raw is not None:
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
    ok = _status_name(result) == "passed"
    if isinstance(reply, dict) and reply.get("stop_reason") == "error":
        raise _error_from_reply(reply, summary or "")
    if not ok:
        if isinstance(reply, dict):
            raise _error_from_reply(reply, summary or "")
        raise ProviderError("driver", f"driver failed: {summary or raw or 'no message'}")
    if not isinstance(reply, dict) or not isinstance(reply.get("content"), list):
        shown = (raw or "")[:200]
        raise ProviderError("malformed", f"driver returned malformed data: {shown!r}")
    response = from_driver_reply(reply)
    if "usage" not in response:  # an upstream driver reports no usage: estimate it
        response["usage"] = {"input_tokens": estimate_tokens(payload_json),
                             "output_tokens": estimate_tokens(reply.get("content"))}
        response["usage_estimated"] = True
    return response


class DriverModelClient:
    """ModelClient over a driver component: `call_driver(payload_json) -> ToolResult`.

    With a `continuation` (mur.inference.continuation) the driver may hold the conversation: the
    payload then carries only the messages it has not seen, scoped to `context_id`; tokens are still
    estimated from the full payload."""

    def __init__(self, call_driver: Callable[[str], Any], *, policy: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] = time.sleep,
                 on_retry: Callable[[int, ProviderError, float], None] | None = None,
                 continuation: Any = None, context_id: str | None = None):
        self.call_driver = call_driver
        self.policy = policy
        self.sleep = sleep
        self.on_retry = on_retry
        self.continuation = continuation
        self.context_id = context_id

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """One inference call through the driver, with retries; E-RUN-016 when it keeps failing."""
        payload = to_driver_payload(request)
        payload_json = json.dumps(payload, ensure_ascii=False)
        held = self.continuation
        wire_json = payload_json if held is None else json.dumps(held.wire(payload, self.context_id), ensure_ascii=False)

        def once() -> dict[str, Any]:
            result = self.call_driver(wire_json)
            response = parse_driver_result(result, payload_json)
            if held is not None:
                meta = getattr(result, "meta", None)
                held.record(meta(KEY) if meta is not None else None, payload["messages"], self.context_id)
            return response

        return with_retries(once, self.policy, sleep=self.sleep, on_retry=self.on_retry)
