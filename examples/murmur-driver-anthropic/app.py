"""murmur-driver-anthropic: the first-party inference driver (`driver` world) for the Anthropic Messages API.

Each `run` call is one inference turn. `tool-input.data` holds the driver wire request; the driver
reads its settings from the WASI environment the runtime injects —

    MURMUR_INFERENCE_ENDPOINT       base URL (required), e.g. https://api.anthropic.com
    MURMUR_INFERENCE_MODEL          fallback when the request names no model
    MURMUR_INFERENCE_API_KEY        sent as x-api-key (optional: a local server may not need one)
    MURMUR_INFERENCE_DRIVER_CONFIG  JSON: request_timeout_ms (default 600000), beta_features,
                                    thinking ("enabled") and thinking_budget_tokens

— and sends a non-streaming `POST {endpoint}/v1/messages` through `murmur:http/outbound`, which the
host holds to capabilities.network.allow. The answer goes back in `tool-result.data`: the wire
reply with the provider's usage, or (status `error`) the provider's message with its HTTP status,
`retry-after` and a failure kind, so the host can decide whether to retry.
"""

import json
import os

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import run as tool
from wit_world.imports import outbound

import anthropic_wire as wire


def _result(reply):
    failed = reply.get("stop_reason") == "error"
    return tool.ToolResult(tool.Status.ERROR if failed else tool.Status.PASSED,
                           reply.get("error") if failed else None, json.dumps(reply), None, False, [])


def _handle(data):
    endpoint = os.environ.get("MURMUR_INFERENCE_ENDPOINT", "").strip().rstrip("/")
    if not endpoint:
        return wire.error_reply("driver: MURMUR_INFERENCE_ENDPOINT is not set (inference.endpoint)", kind="driver")
    config = wire.parse_config(os.environ.get("MURMUR_INFERENCE_DRIVER_CONFIG"))
    try:
        payload = json.loads(data or "")
        if isinstance(payload, dict) and not payload.get("model"):
            payload["model"] = os.environ.get("MURMUR_INFERENCE_MODEL", "")
        body = wire.to_anthropic_request(payload, config)
    except ValueError as exc:
        return wire.error_reply(f"driver: invalid request payload: {exc}", kind="driver")
    headers = [("content-type", "application/json"), ("anthropic-version", wire.ANTHROPIC_VERSION)]
    api_key = os.environ.get("MURMUR_INFERENCE_API_KEY", "").strip()
    if api_key:
        headers.append(("x-api-key", api_key))
    beta = wire.beta_header(config)
    if beta:
        headers.append(("anthropic-beta", beta))
    timeout_ms = config.get("request_timeout_ms", wire.DEFAULT_TIMEOUT_MS)
    timeout_ms = timeout_ms if isinstance(timeout_ms, int) and timeout_ms > 0 else wire.DEFAULT_TIMEOUT_MS
    url = f"{endpoint}/v1/messages"
    try:
        response = outbound.send(outbound.Request("POST", url, headers, json.dumps(body).encode(), timeout_ms))
    except Err as err:
        message = str(err.value)
        return wire.error_reply(f"request to {url} failed: {message}", kind=wire.transport_error_kind(message))
    if response.status >= 400:
        return wire.error_reply(wire.provider_error_message(response.status, response.body),
                                kind="http", status=response.status,
                                retry_after=wire.header(response.headers, "retry-after"))
    try:
        data = json.loads(bytes(response.body).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        shown = bytes(response.body[:200]).decode("utf-8", "replace")
        return wire.error_reply(f"malformed provider response (not JSON: {exc}): {shown!r}", kind="malformed")
    try:
        return wire.from_anthropic_response(data)
    except ValueError as exc:
        return wire.error_reply(f"unusable provider response: {exc}", kind="malformed")


class Run(exports.Run):
    def run(self, input: tool.ToolInput) -> tool.ToolResult:
        try:
            return _result(_handle(input.data))
        except Exception as exc:  # a driver bug must come back as an error result, not a trap
            return _result(wire.error_reply(f"driver: internal error: {type(exc).__name__}: {exc}", kind="driver"))
