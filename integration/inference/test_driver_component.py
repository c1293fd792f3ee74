"""transport: http through the real murmur-driver-anthropic component, the real WASM host and a
loopback model server: the agent loop, token accounting, and every provider failure."""

from __future__ import annotations

import json

import pytest

from mur.errors import MurError
from mur.inference.driver import DriverModelClient, driver_env
from mur.inference.loop import LoopConfig, run_agent_loop
from mur.inference.provider import RetryPolicy
from mur.manifest.capsule import Compaction, Inference, Limits
from mur.manifest.network import parse_allow_entry
from mur.wasm.host import GuestConfig
from mur.wasm.types import ToolInput

TASK = "Greet Ada and Grace, then report."


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def driver_client(driver_wasm, wasm_host):
    """`driver_client(server, config=None, allow=None)` -> (DriverModelClient, sleeps, http events)."""

    def make(server, *, config: dict | None = None, allow: list[str] | None = None, retries: int = 3):
        inference = Inference.model_validate({
            "transport": "http", "model": "claude-haiku-4-5", "endpoint": server.url,
            "driver": {"artifact": "murmur-driver-anthropic", **({"config": config} if config else {})},
        })
        http_events: list[dict] = []
        cfg = GuestConfig(
            wasm_path=driver_wasm, label="murmur-driver-anthropic", preopen=None,
            env=list(driver_env(inference, api_key="sk-ant-test").items()),
            limits=Limits(deadline_seconds=30),
            http_allow=[parse_allow_entry(a) for a in (allow if allow is not None else ["127.0.0.1"])],
            on_http=http_events.append,
        )
        sleeps = Sleeps()
        client = DriverModelClient(lambda data: wasm_host.call_tool(cfg, ToolInput(data=data), kind="driver"),
                                   policy=RetryPolicy(max_retries=retries, base_delay=0.25), sleep=sleeps)
        return client, sleeps, http_events

    return make


class GreetToolBox:
    """The `greet` WASM tool (examples/hello/greet) behind the ToolBox seam."""

    def __init__(self, wasm_host, greet_wasm, tmp_path, events):
        self.host, self.events = wasm_host, events
        self.cfg = GuestConfig(wasm_path=greet_wasm, label="greet", preopen=tmp_path, env=[],
                               limits=Limits(deadline_seconds=30))

    def specs(self):
        return [{"name": "greet", "description": "Greets someone by name.",
                 "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}}}]

    def call(self, name, input, turn):
        result = self.host.call_tool(self.cfg, ToolInput(data=json.dumps(input)))
        self.events.append({"event_type": "tool_call", "turn": turn, "tool_name": name, "status": result.status})
        return (result.data or result.summary or ""), result.status != "passed"


def test_agent_loop_through_the_driver_component(model_server, driver_client, wasm_host, greet_wasm, tmp_path):
    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 310, "output_tokens": 18}},
        {"tool_use": {"name": "greet", "input": {"name": "Grace"}}, "text": "next one",
         "usage": {"input_tokens": 402, "output_tokens": 21}},
        {"text": "Hello, Ada! and Hello, Grace! sent.", "usage": {"input_tokens": 515, "output_tokens": 12}},
    ])
    client, sleeps, http_events = driver_client(server, config={"beta_features": ["tools-2024"]})
    events: list[dict] = []
    config = LoopConfig(model="claude-haiku-4-5", max_tokens=2048, system_prompt="Be kind.")
    outcome = run_agent_loop(TASK, config, client, GreetToolBox(wasm_host, greet_wasm, tmp_path, events),
                             events.append, workdir=tmp_path)
    assert outcome.exit_status == "ok" and outcome.result == "Hello, Ada! and Hello, Grace! sent."
    assert (outcome.turns, outcome.tool_calls) == (3, 2)
    served = server.served_usage()
    inference = [e for e in events if e["event_type"] == "inference"]
    assert sum(e["input_tokens"] for e in inference) == served["input_tokens"] == outcome.input_tokens == 1227
    assert sum(e["output_tokens"] for e in inference) == served["output_tokens"] == outcome.output_tokens == 51
    first, second, third = (r for r in server.requests)
    assert first.headers["x-api-key"] == "sk-ant-test" and first.headers["anthropic-version"] == "2023-06-01"
    assert first.headers["anthropic-beta"] == "tools-2024"
    assert first.body["max_tokens"] == 2048 and first.body["stream"] is False
    assert first.body["system"].endswith("Be kind.") and first.body["tools"][0]["name"] == "greet"
    assert second.body["messages"][-1]["content"][0]["content"] == [{"type": "text", "text": "Hello, Ada!"}]
    assert third.body["messages"][-1]["content"][0]["content"][0]["text"] == "Hello, Grace!"
    assert sleeps == [] and [e["allowed"] for e in http_events] == [True, True, True]


def test_compaction_through_the_driver(model_server, driver_client, wasm_host, greet_wasm, tmp_path):
    # the replacement an on-compaction hook commits is what the driver sends next (no call of mur's own)
    from mur.inference.compaction import CompactionResult

    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 750, "output_tokens": 50}},
        {"text": "done", "usage": {"input_tokens": 90, "output_tokens": 2}},
    ])
    client, _, _ = driver_client(server)
    events: list[dict] = []

    def hook(request):
        return CompactionResult([{"role": "user", "content": [{"type": "text", "text": "Summary: greeted Ada."}]}],
                                "Summary: greeted Ada.")

    config = LoopConfig(model="claude-haiku-4-5", context_max_tokens=1000,
                        compaction=Compaction(threshold=0.8, dump_summaries=True))
    outcome = run_agent_loop(TASK, config, client, GreetToolBox(wasm_host, greet_wasm, tmp_path, events),
                             events.append, workdir=tmp_path, compactor=hook)
    assert outcome.exit_status == "ok" and outcome.compactions == 1
    assert [e for e in events if e["event_type"] == "compaction"][0]["tokens_before"] == 800
    assert json.loads((tmp_path / "out" / "compaction-summaries.jsonl").read_text())["summary"] == "Summary: greeted Ada."
    assert len(server.requests) == 2
    assert server.requests[1].body["messages"][0]["content"][0]["text"] == "Summary: greeted Ada."
    assert (outcome.input_tokens, outcome.output_tokens) == tuple(server.served_usage().values())


def complete(client):
    return client.complete({"model": "claude-haiku-4-5", "max_tokens": 64,
                            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})


def test_401_fails_at_once_with_the_provider_message(model_server, driver_client):
    server = model_server([{"error": {"status": 401, "message": "invalid x-api-key"}}])
    client, sleeps, _ = driver_client(server)
    with pytest.raises(MurError) as err:
        complete(client)
    assert err.value.code == "E-RUN-016"
    assert err.value.message == "inference provider failed: HTTP 401: authentication_error: invalid x-api-key"
    assert sleeps == [] and len(server.requests) == 1


def test_429_retry_after_is_honoured(model_server, driver_client):
    server = model_server([{"error": {"status": 429, "message": "slow down", "retry_after": 4}},
                           {"text": "recovered", "usage": {"input_tokens": 3, "output_tokens": 1}}])
    client, sleeps, _ = driver_client(server)
    reply = complete(client)
    assert reply["content"] == [{"type": "text", "text": "recovered"}] and sleeps == [4.0]


def test_5xx_is_retried_with_backoff_then_fails(model_server, driver_client):
    server = model_server([{"error": {"status": 529, "message": "overloaded"}, "repeat": 3}])
    client, sleeps, _ = driver_client(server, retries=2)
    with pytest.raises(MurError) as err:
        complete(client)
    assert err.value.message == "inference provider failed: HTTP 529: overloaded_error: overloaded (after 3 attempts)"
    assert sleeps == [0.25, 0.5]


def test_timeout_is_retried_then_fails(model_server, driver_client):
    server = model_server([{"text": "late", "delay": 3, "repeat": 2}])
    client, sleeps, _ = driver_client(server, config={"request_timeout_ms": 400}, retries=1)
    with pytest.raises(MurError) as err:
        complete(client)
    assert "timed out" in err.value.message.lower() or "timeout" in err.value.message.lower()
    assert "(after 2 attempts)" in err.value.message and len(sleeps) == 1


def test_malformed_json_fails_with_the_reason(model_server, driver_client):
    server = model_server([{"malformed": '{"content": [ broken'}])
    client, sleeps, _ = driver_client(server)
    with pytest.raises(MurError) as err:
        complete(client)
    assert "malformed provider response" in err.value.message and "broken" in err.value.message
    assert sleeps == []


def test_endpoint_outside_network_allow_is_refused_without_retry(model_server, driver_client):
    server = model_server([{"text": "never served"}])
    client, sleeps, http_events = driver_client(server, allow=["api.anthropic.com"])
    with pytest.raises(MurError) as err:
        complete(client)
    assert "network policy" in err.value.message and sleeps == []
    assert server.requests == [] and http_events[0]["allowed"] is False


def test_loop_turns_a_provider_failure_into_a_failed_session(model_server, driver_client, tmp_path):
    server = model_server([{"error": {"status": 400, "message": "max_tokens: too large"}}])
    client, _, _ = driver_client(server)
    events: list[dict] = []

    class NoTools:
        def specs(self):
            return []

        def call(self, name, input, turn):
            raise AssertionError("no tool calls expected")

    outcome = run_agent_loop("x", LoopConfig(model="m", max_tokens=10**9), client, NoTools(), events.append,
                             workdir=tmp_path)
    assert outcome.exit_status == "failed"
    assert outcome.error == "inference provider failed: HTTP 400: invalid_request_error: max_tokens: too large"
    assert (tmp_path / "out" / "result.txt").read_text().startswith("error: inference provider failed: HTTP 400")
    assert server.requests[0].body["max_tokens"] == 10**9  # forwarded verbatim, never clamped
