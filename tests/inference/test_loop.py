"""The agent loop against a real loopback model server (httpx ModelClient) with an in-test ToolBox."""

from __future__ import annotations

import json

import pytest

from mur.errors import MurError
from mur.inference.compaction import CompactionResult
from mur.inference.loop import LoopConfig, run_agent_loop
from mur.inference.prompts import UNTRUSTED_CONTENT_NOTICE
from mur.manifest.capsule import Compaction

TASK = "Add 1+2, then 3+4."


def inference_events(events):
    return [e for e in events if e["event_type"] == "inference"]


def run(server, make_client, toolbox, events, tmp_path=None, **cfg):
    config = LoopConfig(model=cfg.pop("model", "claude-main"), **{"max_turns": 10, **cfg})
    return run_agent_loop(TASK, config, make_client(server), toolbox, events.append, workdir=tmp_path)


def test_multi_turn_tool_use_and_token_totals(model_server, make_client, toolbox, events, tmp_path):
    server = model_server([
        {"tool_use": {"name": "add", "input": {"numbers": [1, 2]}}, "usage": {"input_tokens": 100, "output_tokens": 10}},
        {"tool_use": [{"name": "add", "input": {"numbers": [3, 4]}}, {"name": "fail", "input": {}}],
         "text": "two at once", "usage": {"input_tokens": 150, "output_tokens": 12}},
        {"text": "The sums are 3 and 7.", "usage": {"input_tokens": 210, "output_tokens": 8}},
    ])
    outcome = run(server, make_client, toolbox, events, tmp_path, max_tokens=1234, system_prompt="Be exact.")
    assert outcome.exit_status == "ok" and outcome.result == "The sums are 3 and 7."
    assert (outcome.turns, outcome.tool_calls) == (3, 3)
    served = server.served_usage()
    assert (outcome.input_tokens, outcome.output_tokens) == (served["input_tokens"], served["output_tokens"]) == (460, 30)
    inf = inference_events(events)
    assert sum(e["input_tokens"] for e in inf) == 460 and sum(e["output_tokens"] for e in inf) == 30
    assert [(e["turn"], e["decision"], e["tool_name"]) for e in inf] == [
        (0, "tool_call", "add"), (1, "tool_call", "add"), (2, "end_turn", None)]
    assert [c[:2] for c in toolbox.calls] == [("add", {"numbers": [1, 2]}), ("add", {"numbers": [3, 4]}), ("fail", {})]
    first, second, third = (r.body for r in server.requests)
    assert first["max_tokens"] == 1234 and [t["name"] for t in first["tools"]] == ["add", "fail"]
    assert UNTRUSTED_CONTENT_NOTICE in first["system"] and first["system"].endswith("Be exact.")
    assert second["messages"][-1]["content"][0]["content"] == [{"type": "text", "text": "3"}]
    results = third["messages"][-1]["content"]
    assert [(r["content"][0]["text"], r.get("is_error", False)) for r in results] == [("7", False), ("tool 'fail' failed", True)]
    assert (tmp_path / "out" / "result.txt").read_text() == "The sums are 3 and 7."
    assert outcome.messages[-1]["role"] == "assistant" and outcome.messages[0]["content"][0]["text"] == TASK


def test_max_turns_reached(model_server, make_client, toolbox, events, tmp_path):
    server = model_server([{"tool_use": {"name": "add", "input": {"numbers": [1]}}, "repeat": 5}])
    outcome = run(server, make_client, toolbox, events, tmp_path, max_turns=3)
    assert outcome.exit_status == "max_turns_reached" and outcome.turns == 3
    assert outcome.result == "error: inference loop exceeded 3 turns"
    assert server.remaining == 2 and len(inference_events(events)) == 3
    assert (tmp_path / "out" / "result.txt").read_text() == outcome.result


def compaction_script(second_turn_output: int) -> list[dict]:
    return [
        {"tool_use": {"name": "add", "input": {"numbers": [1, 2]}}, "usage": {"input_tokens": 300, "output_tokens": 100}},
        {"tool_use": {"name": "add", "input": {"numbers": [3, 4]}},
         "usage": {"input_tokens": 420, "output_tokens": second_turn_output}},
        {"text": "Done: 3 and 7.", "usage": {"input_tokens": 90, "output_tokens": 6}},
    ]


class Hook:
    """An on-compaction hook's decision, as the session's hook dispatch hands it to the loop."""

    def __init__(self, summary: str | None = "SUMMARY-1: added 1+2=3, now adding 3+4"):
        self.summary = summary
        self.seen = []

    def __call__(self, request):
        self.seen.append(request)
        if self.summary is None:
            return None  # no hook answered replace-context
        return CompactionResult([{"role": "user", "content": [{"type": "text", "text": self.summary}]}], self.summary)


def test_compaction_fires_exactly_at_threshold(model_server, make_client, toolbox, events, tmp_path):
    server = model_server(compaction_script(second_turn_output=80))  # 420 + 80 = 500 = 0.5 * 1000
    hook = Hook()
    comp = Compaction(threshold=0.5, model="claude-small", dump_summaries=True)
    config = LoopConfig(model="claude-main", context_max_tokens=1000, compaction=comp,
                        compaction_system_prompt="Summarise tersely.")
    outcome = run_agent_loop(TASK, config, make_client(server), toolbox, events.append, workdir=tmp_path,
                             compactor=hook)
    assert outcome.exit_status == "ok" and outcome.result == "Done: 3 and 7." and outcome.compactions == 1
    # the hook gets the spec's inputs verbatim; the runtime itself makes no summarising call
    (request,) = hook.seen
    assert (request.turn, request.tokens_before, request.threshold, request.model, request.system_prompt) == (
        1, 500, 0.5, "claude-small", "Summarise tersely.")
    assert len(server.requests) == 3
    compactions = [e for e in events if e["event_type"] == "compaction"]
    assert len(compactions) == 1 and compactions[0]["turn"] == 1 and compactions[0]["tokens_before"] == 500
    assert 0 < compactions[0]["tokens_after"] < 500
    after = server.requests[2].body["messages"]
    assert [m["role"] for m in after] == ["user", "assistant", "user"]
    assert after[0]["content"][0]["text"].startswith("SUMMARY-1")
    assert after[1]["content"][0]["input"] == {"numbers": [3, 4]}  # the compacting turn's own call survives
    lines = (tmp_path / "out" / "compaction-summaries.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"turn": 1, "tokens_before": 500,
                                                     "tokens_after": compactions[0]["tokens_after"],
                                                     "summary": "SUMMARY-1: added 1+2=3, now adding 3+4"}]


def test_compaction_does_not_fire_one_token_below_threshold(model_server, make_client, toolbox, events, tmp_path):
    server = model_server(compaction_script(second_turn_output=79))
    hook = Hook()
    config = LoopConfig(model="m", context_max_tokens=1000, compaction=Compaction(threshold=0.5, dump_summaries=True))
    outcome = run_agent_loop(TASK, config, make_client(server), toolbox, events.append, workdir=tmp_path,
                             compactor=hook)
    assert outcome.exit_status == "ok" and outcome.compactions == 0 and hook.seen == []
    assert not [e for e in events if e["event_type"] == "compaction"]
    assert not (tmp_path / "out" / "compaction-summaries.jsonl").exists()


@pytest.mark.parametrize("hook", [None, Hook(summary=None)], ids=["no-hook", "hook-declines"])
def test_without_a_replacing_hook_the_budget_is_only_logged(model_server, make_client, toolbox, events, hook):
    # The spec and upstream v0.2 leave compaction to the hook: no summarising call of mur's own, the
    # context stays as it is, and upstream's line goes to the bootstrap log.
    server = model_server([
        {"tool_use": {"name": "add", "input": {"numbers": [1]}}, "usage": {"input_tokens": 980, "output_tokens": 0}},
        {"text": "done", "usage": {"input_tokens": 10, "output_tokens": 2}},
    ])
    logged = []
    config = LoopConfig(model="claude-main", context_max_tokens=1000, log=logged.append)  # threshold 0.98
    outcome = run_agent_loop(TASK, config, make_client(server), toolbox, events.append, compactor=hook)
    assert outcome.exit_status == "ok" and outcome.result == "done" and outcome.compactions == 0
    assert len(server.requests) == 2 and len(server.requests[1].body["messages"]) == 3
    assert logged == ["[compaction] threshold reached but no hook returned replace-context; continuing without compaction"]
    assert not [e for e in events if e["event_type"] == "compaction"]


def test_no_compaction_without_context_budget(model_server, make_client, toolbox, events):
    server = model_server([{"tool_use": {"name": "add", "input": {"numbers": [1]}},
                            "usage": {"input_tokens": 10**6, "output_tokens": 10}}, {"text": "done"}])
    hook, logged = Hook(), []
    config = LoopConfig(model="m", compaction=Compaction(threshold=0.1), log=logged.append)
    outcome = run_agent_loop(TASK, config, make_client(server), toolbox, events.append, compactor=hook)
    assert outcome.exit_status == "ok" and outcome.compactions == 0 and len(server.requests) == 2
    assert hook.seen == [] and logged == []


def test_failed_compaction_fails_the_session(model_server, make_client, toolbox, events, tmp_path):
    server = model_server([
        {"tool_use": {"name": "add", "input": {"numbers": [1]}}, "usage": {"input_tokens": 990, "output_tokens": 10}},
        {"text": "never asked"},
    ])

    def broken(request):
        raise MurError("E-RUN-007", "on-compaction hook 'squash' failed: boom")

    config = LoopConfig(model="m", context_max_tokens=1000)
    outcome = run_agent_loop(TASK, config, make_client(server), toolbox, events.append, workdir=tmp_path,
                             compactor=broken)
    assert outcome.exit_status == "failed" and outcome.error_code == "E-RUN-007"
    assert outcome.error == "compaction failed: on-compaction hook 'squash' failed: boom"
    assert len(server.requests) == 1


def test_custom_compactor_replaces_the_model_summariser(model_server, make_client, toolbox, events):
    server = model_server([
        {"tool_use": {"name": "add", "input": {"numbers": [1]}}, "usage": {"input_tokens": 99, "output_tokens": 1}},
        {"text": "done"},
    ])
    seen = []

    def hook(request):
        seen.append((request.turn, request.tokens_before, request.threshold, request.model))
        return CompactionResult([{"role": "user", "content": [{"type": "text", "text": "hooked summary"}]}], "hooked summary")

    config = LoopConfig(model="m", context_max_tokens=100, compaction=Compaction(threshold=1.0, model="tiny"))
    outcome = run_agent_loop(TASK, config, make_client(server), toolbox, events.append, compactor=hook)
    assert seen == [(0, 100, 1.0, "tiny")] and outcome.compactions == 1
    assert server.requests[1].body["messages"][0]["content"][0]["text"] == "hooked summary"


@pytest.mark.parametrize("script, words, requests", [
    ([{"error": {"status": 401, "message": "invalid x-api-key"}}],
     "inference provider failed: HTTP 401: authentication_error: invalid x-api-key", 1),
    ([{"error": {"status": 500, "message": "boom"}, "repeat": 4}], "HTTP 500: api_error: boom (after 4 attempts)", 4),
    ([{"malformed": True}], "malformed provider response", 1),
    ([{"text": "slow", "delay": 2, "repeat": 4}], "timed out (after 4 attempts)", 4),
])
def test_provider_failures_end_the_session_failed(script, words, requests, model_server, make_client, toolbox,
                                                   events, tmp_path):
    server = model_server(script)
    config = LoopConfig(model="m")
    outcome = run_agent_loop(TASK, config, make_client(server, timeout=0.3), toolbox, events.append, workdir=tmp_path)
    assert outcome.exit_status == "failed" and outcome.error_code == "E-RUN-016"
    assert words in outcome.error and len(server.requests) == requests
    assert outcome.error_hint  # what to check travels with the failure to `mur run`'s error line
    assert (tmp_path / "out" / "result.txt").read_text() == f"error: {outcome.error}"
    assert outcome.turns == 0 and not inference_events(events)


def test_rate_limit_then_success(model_server, make_client, toolbox, events, sleeps):
    server = model_server([{"error": {"status": 429, "retry_after": 3}}, {"text": "ok", "usage": {"input_tokens": 5, "output_tokens": 1}}])
    outcome = run(server, make_client, toolbox, events)
    assert outcome.exit_status == "ok" and outcome.result == "ok" and sleeps == [3.0]
    assert (outcome.input_tokens, outcome.output_tokens) == (5, 1)


def test_unsupported_stop_reason_fails(model_server, make_client, toolbox, events):
    server = model_server([{"text": "I won't", "stop_reason": "refusal"}])
    outcome = run(server, make_client, toolbox, events)
    assert outcome.exit_status == "failed" and outcome.error_code == "E-RUN-007"
    assert "unsupported stop_reason 'refusal'" in outcome.error and outcome.turns == 1


def test_max_tokens_stop_ends_with_the_text(model_server, make_client, toolbox, events):
    server = model_server([{"text": "cut o", "stop_reason": "max_tokens"}])
    outcome = run(server, make_client, toolbox, events)
    assert (outcome.exit_status, outcome.result) == ("ok", "cut o")
    assert inference_events(events)[0]["decision"] == "text"


class RefusingToolBox:
    def specs(self):
        return [{"name": "sh", "description": "shell", "input_schema": {"type": "object"}}]

    def call(self, name, input, turn):
        raise MurError("E-RUN-015", "shell tool refused: binary not allowed")


def test_a_refused_tool_is_an_error_result_not_a_crash(model_server, make_client, events):
    server = model_server([{"tool_use": {"name": "sh", "input": {"command": "rm -rf /"}}}, {"text": "ok, giving up"}])
    outcome = run_agent_loop(TASK, LoopConfig(model="m"), make_client(server), RefusingToolBox(), events.append)
    assert outcome.exit_status == "ok" and outcome.tool_calls == 1
    result = server.requests[1].body["messages"][-1]["content"][0]
    assert result["is_error"] is True and "error[E-RUN-015]" in result["content"][0]["text"]


def test_history_is_prepended(model_server, make_client, toolbox, events):
    server = model_server([{"text": "again"}])
    history = [{"role": "user", "content": [{"type": "text", "text": "earlier"}]},
               {"role": "assistant", "content": [{"type": "text", "text": "earlier answer"}]}]
    run_agent_loop("now", LoopConfig(model="m"), make_client(server), toolbox, events.append, history=history)
    texts = [m["content"][0]["text"] for m in server.requests[0].body["messages"]]
    assert texts == ["earlier", "earlier answer", "now"]
