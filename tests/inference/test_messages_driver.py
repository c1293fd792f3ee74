"""Driver wire format conversions, the MURMUR_INFERENCE_* env table, and driver result parsing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mur.inference.driver import driver_env, parse_driver_result
from mur.inference.messages import from_driver_reply, to_driver_payload, tool_result_block, user_text
from mur.inference.provider import ProviderError
from mur.manifest.capsule import Inference
from mur.wasm.types import ToolResult

ROOT = Path(__file__).resolve().parents[2]


def load_wire():
    """The driver guest's pure translation module, loaded from examples/ (no WIT needed)."""
    path = ROOT / "examples" / "murmur-driver-anthropic" / "anthropic_wire.py"
    spec = importlib.util.spec_from_file_location("anthropic_wire", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REQUEST = {
    "model": "claude-x",
    "max_tokens": 4096,
    "system": "be brief",
    "tools": [{"name": "add", "description": "adds", "input_schema": {"type": "object", "properties": {}}}],
    "messages": [
        user_text("sum 1 and 2"),
        {"role": "assistant", "content": [{"type": "text", "text": "calling"},
                                          {"type": "tool_use", "id": "t1", "name": "add", "input": {"n": [1, 2]}},
                                          {"type": "tool_use", "id": "t2", "name": "add", "input": {"n": [3]}}]},
        {"role": "user", "content": [tool_result_block("t1", "3"), tool_result_block("t2", "boom", True)]},
    ],
}


def test_request_becomes_upstream_wire_payload():
    payload = to_driver_payload(REQUEST)
    assert list(payload) == ["model", "max_tokens", "messages", "tools", "params", "system"]
    assert payload["tools"] == [{"name": "add", "description": "adds", "parameters": {"type": "object", "properties": {}}}]
    roles = [m["role"] for m in payload["messages"]]
    assert roles == ["user", "assistant", "tool", "tool"]
    assert payload["messages"][1]["content"][1] == {"type": "tool_call", "id": "t1", "name": "add", "input": {"n": [1, 2]}}
    assert payload["messages"][3] == {"role": "tool", "tool_call_id": "t2", "is_error": True,
                                      "content": [{"type": "text", "text": "boom"}]}


def test_guest_translation_round_trips_the_request():
    wire = load_wire()
    body = wire.to_anthropic_request(to_driver_payload(REQUEST), {})
    assert body["stream"] is False
    assert body["system"] == "be brief" and body["max_tokens"] == 4096
    assert body["tools"] == [{"name": "add", "input_schema": {"type": "object", "properties": {}}, "description": "adds"}]
    # both tool results answer one assistant turn: one user message, as the API requires
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "3"}]},
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "boom"}], "is_error": True},
    ]
    assert body["messages"][:2] == REQUEST["messages"][:2]


def test_guest_translation_of_replies_and_thinking_config():
    wire = load_wire()
    reply = wire.from_anthropic_response({
        "content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "x", "name": "add", "input": {}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 7, "output_tokens": 2, "service_tier": "standard"},
    })
    assert reply == {"stop_reason": "tool_call", "usage": {"input_tokens": 7, "output_tokens": 2},
                     "content": [{"type": "text", "text": "hi"},
                                 {"type": "tool_call", "id": "x", "name": "add", "input": {}}]}
    with pytest.raises(ValueError):
        wire.from_anthropic_response({"content": [], "stop_reason": "refusal"})
    body = wire.to_anthropic_request({"model": "m", "max_tokens": 100, "messages": [],
                                      "params": {"temperature": 0.2, "tool_choice": "required"}},
                                     {"thinking": "enabled", "thinking_budget_tokens": 5000})
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 99}  # capped at max_tokens - 1
    assert "temperature" not in body and body["tool_choice"] == {"type": "any"}
    assert wire.transport_error_kind("http error: ReadTimeout: timed out") == "timeout"
    assert wire.transport_error_kind("network policy: 'x' not in capabilities.network.allow") == "policy"


def test_driver_reply_becomes_anthropic_response():
    response = from_driver_reply({"stop_reason": "tool_call", "usage": {"input_tokens": 5, "output_tokens": 1},
                                  "content": [{"type": "tool_call", "id": "a", "name": "add", "input": {"n": 1}}]})
    assert response["stop_reason"] == "tool_use"
    assert response["content"] == [{"type": "tool_use", "id": "a", "name": "add", "input": {"n": 1}}]
    assert response["usage"] == {"input_tokens": 5, "output_tokens": 1}


def http_inference(**extra) -> Inference:
    base = {"transport": "http", "model": "claude-x", "endpoint": "https://api.anthropic.com",
            "driver": {"artifact": "murmur-driver-anthropic", "config": {"beta_features": ["a"]}}}
    return Inference.model_validate({**base, **extra})


def test_driver_env_follows_the_spec_table():
    env = driver_env(http_inference(), api_key="sk-live")
    assert env == {
        "MURMUR_INFERENCE_TRANSPORT": "http",
        "MURMUR_INFERENCE_MODEL": "claude-x",
        "MURMUR_INFERENCE_ENDPOINT": "https://api.anthropic.com",
        "MURMUR_INFERENCE_DRIVER": "murmur-driver-anthropic",
        "MURMUR_INFERENCE_DRIVER_CONFIG": '{"beta_features":["a"]}',
        "MURMUR_INFERENCE_API_KEY": "sk-live",
    }
    no_key = driver_env(http_inference(driver={"artifact": "d"}))
    assert "MURMUR_INFERENCE_API_KEY" not in no_key and "MURMUR_INFERENCE_DRIVER_CONFIG" not in no_key
    process = driver_env(Inference.model_validate({"transport": "process", "model": "claude-haiku"}), api_key="x")
    assert process == {"MURMUR_INFERENCE_TRANSPORT": "process", "MURMUR_INFERENCE_MODEL": "claude-haiku",
                       "MURMUR_INFERENCE_ENDPOINT": "", "MURMUR_INFERENCE_DRIVER": ""}
    assert driver_env(None) == {}


def result(status: str, data: object = None, summary: str | None = None) -> ToolResult:
    return ToolResult(status=status, summary=summary, data=data if data is None or isinstance(data, str) else json.dumps(data))


def test_parse_driver_result_success_and_estimated_usage():
    ok = parse_driver_result(result("passed", {"stop_reason": "end_turn", "content": [{"type": "text", "text": "hi"}],
                                               "usage": {"input_tokens": 9, "output_tokens": 1}}), "{}")
    assert ok["usage"] == {"input_tokens": 9, "output_tokens": 1} and "usage_estimated" not in ok
    upstream = parse_driver_result(result("passed", {"stop_reason": "end_turn",
                                                     "content": [{"type": "text", "text": "x" * 40}]}), "p" * 400)
    assert upstream["usage_estimated"] is True and upstream["usage"]["input_tokens"] == 100


@pytest.mark.parametrize("tool_result, kind, status, retryable, retry_after", [
    (result("error", {"stop_reason": "error", "error": "rate_limit_error: slow", "status": 429, "retry_after": "3",
                      "kind": "http"}, "rate_limit_error: slow"), "http", 429, True, 3.0),
    (result("error", {"stop_reason": "error", "error": "authentication_error: bad key", "status": 401,
                      "kind": "http"}), "http", 401, False, None),
    (result("error", {"stop_reason": "error", "error": "HTTP 500: boom"}), "driver", None, False, None),
    (result("error", {"stop_reason": "error", "error": "timed out", "kind": "timeout"}), "timeout", None, True, None),
    (result("error", None, "driver crashed"), "driver", None, False, None),
    (result("passed", "{not json"), "malformed", None, False, None),
    (result("passed", {"content": "nope"}), "malformed", None, False, None),
])
def test_parse_driver_result_failures(tool_result, kind, status, retryable, retry_after):
    with pytest.raises(ProviderError) as err:
        parse_driver_result(tool_result, "{}")
    assert (err.value.kind, err.value.status, err.value.retryable, err.value.retry_after) == (
        kind, status, retryable, retry_after)
