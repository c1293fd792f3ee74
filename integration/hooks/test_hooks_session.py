"""Hook artifacts in real sessions: real hook components on wasmtime, real capsules, a loopback model.

Driven through hook_harness.run_session, which runs mur/session/runner.py's Session stage by stage and
can inject a model client and build_hooks' knobs (see hook_harness's docstring).
"""

from __future__ import annotations

import json
import threading

import pytest
from hook_support import hook_entry
from hook_harness import run_session

SESSION_EVENTS = ["on-task-start", "on-session-start", "on-tool-call", "on-session-end", "on-task-end"]


def faults(result):
    return [(e["hook_name"], e["event"], e["arm"]) for e in result.events("hook_dispatch_error")]


# --- observation ------------------------------------------------------------------------------


def test_blocking_observers_see_every_event_in_order_and_declaration_order(hello_capsule, make_hook, debug_wasm,
                                                                           probe_wasm):
    shared = {"filesystem": {"scope": "."}}
    hooks = [hook_entry(name, make_hook(name, debug_wasm, execution_mode="blocking"), shared)
             for name in ("debug-second", "debug-first")]  # declaration order, not alphabetical
    hooks.append(hook_entry("probe-env", make_hook("probe-env", probe_wasm)))
    result = run_session(hello_capsule(hooks), "Ada")
    assert result.status == "ok", result.error
    lines = [json.loads(x) for x in (result.accessible / "hook-debug.jsonl").read_text().splitlines()]
    assert [(x["hook"], x["event"]) for x in lines] == [
        (hook, event) for event in SESSION_EVENTS for hook in ("debug-second", "debug-first")]
    by_event = {x["event"]: x["data"] for x in lines if x["hook"] == "debug-first"}
    assert by_event["on-tool-call"]["tool_name"] == "greet" and by_event["on-tool-call"]["status"] == "ok"
    assert by_event["on-session-start"]["capsule_name"] == "hello"
    assert by_event["on-session-start"]["session_id"] == result.trace[0]["session_id"]
    assert by_event["on-session-end"]["total_tool_calls"] == 1
    assert by_event["on-session-end"]["exit_status"] == "ok"
    task_start = result.events("task_start")[0]
    assert by_event["on-task-start"] == {"task_id": task_start["task_id"], "context_id": task_start["context_id"],
                                         "source": "task_md", "input_bytes": 3}
    # the environment of a hook: the runtime's MURMUR_* variables and nothing from the host
    [start] = [x for x in result.probe_lines("probe-env") if x["event"] == "on-session-start"]
    env = start["data"]["env"]
    assert env["MURMUR_HOOK_NAME"] == "probe-env" and env["MURMUR_SESSION_ID"] == task_start["session_id"]
    assert env["MURMUR_CAPSULE_NAME"] == "hello" and env["MURMUR_CAPSULE_URL"].startswith("localhost:")
    assert all(name.startswith("MURMUR_") for name in env), env
    assert faults(result) == []


def test_shipped_debug_hook_is_async_and_still_complete(hello_capsule, make_hook, debug_wasm):
    path = make_hook("murmur-hook-debug", debug_wasm, execution_mode="async", commit_policy="none")
    result = run_session(hello_capsule([hook_entry("murmur-hook-debug", path, {"filesystem": {"scope": "."}})]),
                         "Ada")
    assert result.status == "ok"
    lines = [json.loads(x) for x in (result.accessible / "hook-debug.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines] == SESSION_EVENTS  # drained at close, in order


# --- default-deny -----------------------------------------------------------------------------


def test_ungranted_hook_has_no_files_and_no_network(hello_capsule, make_hook, probe_wasm, http_server):
    result = run_session(hello_capsule([hook_entry("probe-fs-net", make_hook("probe-fs-net", probe_wasm))],
                                       {"observability": {"otel_endpoint": http_server.url}}), "Ada")
    assert result.status == "ok"
    [start] = [x for x in result.probe_lines("probe-fs-net") if x["event"] == "on-session-start"]
    fs, net = start["data"]["fs"], start["data"]["net"]
    assert "error" in fs["write"] and "error" in fs["host"] and "error" in fs["listing"]
    assert net == {"error": f"network policy: '{http_server.url}/probe-net' not in capabilities.network.allow"}
    assert [hit for hit in http_server.hits if hit != "/v1/traces"] == []  # the session's own OTel export aside
    assert not list(result.accessible.rglob("probe-fs.txt"))
    [denied] = result.events("network_denied")
    assert denied["artifact"] == "probe-fs-net" and denied["url"] == f"{http_server.url}/probe-net"


def test_granted_hook_reaches_exactly_its_scope_and_host(hello_capsule, make_hook, probe_wasm, http_server):
    caps = {"filesystem": {"scope": "hook-state"}, "network": {"allow": [http_server.url]}}
    result = run_session(hello_capsule([hook_entry("probe-fs-net", make_hook("probe-fs-net", probe_wasm), caps)],
                                       {"observability": {"otel_endpoint": http_server.url}}), "Ada")
    assert result.status == "ok"
    [start] = [x for x in result.probe_lines("probe-fs-net") if x["event"] == "on-session-start"]
    fs, net = start["data"]["fs"], start["data"]["net"]
    assert fs["write"] == {"ok": "written by probe-fs-net"}
    assert (result.accessible / "hook-state" / "probe-fs.txt").read_text() == "written by probe-fs-net"
    assert fs["listing"] == {"ok": ["probe-fs.txt"]}  # only its own subtree, not the workdir
    assert "error" in fs["host"]  # the host filesystem stays out of reach
    assert net == {"ok": 200} and [hit for hit in http_server.hits if hit != "/v1/traces"] == ["/probe-net"]
    assert result.events("network_denied") == []


# --- failures -----------------------------------------------------------------------------------


def test_err_trap_and_wrong_arm_are_logged_and_traced_while_the_session_ends_ok(hello_capsule, make_hook,
                                                                                probe_wasm):
    names = ("probe-fail", "probe-trap", "probe-wrongarm")
    result = run_session(hello_capsule([hook_entry(n, make_hook(n, probe_wasm)) for n in names]), "Ada")
    assert result.status == "ok" and (result.session / "out" / "result.txt").read_text().startswith("Hello, Ada")
    assert faults(result) == [("probe-fail", "on-tool-call", "error"), ("probe-trap", "on-tool-call", "error"),
                              ("probe-wrongarm", "on-tool-call", "write-manifests")]
    assert "hook 'probe-fail' on-tool-call returned an error: probe asked to fail" in result.hook_log("probe-fail")
    trap_log = result.hook_log("probe-trap")
    assert "hook 'probe-trap' trapped" in trap_log and "RuntimeError: probe trap" in trap_log
    # the trapped hook is instantiated again for the next event (its memory is gone, and that is logged)
    assert "instantiated again after a failure" in trap_log
    assert [x["event"] for x in result.probe_lines("probe-trap")][-2:] == ["on-session-end", "on-task-end"]
    assert "unsupported hook-output arm 'write-manifests' from 'on-tool-call'" in result.hook_log("probe-wrongarm")
    # trace order: the fault follows the event that caused it
    kinds = [e["event_type"] for e in result.trace]
    assert kinds.index("hook_dispatch_error") > kinds.index("tool_call")


def test_bad_hook_contract_fails_the_launch(hello_capsule, make_hook, probe_wasm):
    from mur.errors import MurError

    path = make_hook("probe-bad", probe_wasm, execution_mode="async", commit_policy="reopen-task")
    with pytest.raises(MurError) as info:
        run_session(hello_capsule([hook_entry("probe-bad", path)]), "Ada")
    assert info.value.code == "E-MAN-003"
    assert info.value.message.startswith("tools/probe-bad/murmur.yaml: async-with-commit not supported")


# --- eval -----------------------------------------------------------------------------------------


def eval_records(result):
    lines = [json.loads(x) for x in (result.accessible / "eval.jsonl").read_text().splitlines()]
    return {x["scorer"]: x for x in lines if x["record_type"] == "event_score"}, lines[-1]


def test_eval_hook_scores_a_session(http_capsule, model_server, make_hook, eval_wasm, monkeypatch):
    monkeypatch.setenv("MURMUR_CASE_ID", "case_001")
    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 300, "output_tokens": 20}},
        {"text": "Greeted Ada.", "usage": {"input_tokens": 400, "output_tokens": 10}},
    ])
    scorers = [
        {"type": "exit_ok", "name": "success_check"},
        {"type": "max_turns", "name": "turn_limit", "max": 5},
        {"type": "max_turns", "name": "one_turn", "max": 1},
        {"type": "max_tokens", "name": "token_budget", "max": 1000},
        {"type": "tool_sequence", "name": "tool_order", "expected": ["greet"]},
        {"type": "tool_sequence", "name": "greet_then_bash", "expected": ["greet", "bash"]},
        {"type": "llm_judge", "name": "judge"},
    ]
    hook = hook_entry("murmur-hook-eval", make_hook("murmur-hook-eval", eval_wasm), {"filesystem": {"scope": "."}})
    manifest = http_capsule(server.url, [hook], extra={"observability": {"eval": {"dataset_id": "ds-1",
                                                                                   "scorers": scorers}}})
    result = run_session(manifest, "Greet Ada")
    assert result.status == "ok", result.error
    scores, run = eval_records(result)
    got = {name: (r["result"], r["score"]) for name, r in scores.items()}
    assert got == {"success_check": ("pass", 1.0), "turn_limit": ("pass", 1.0), "one_turn": ("fail", 0.0),
                   "token_budget": ("pass", 1.0), "tool_order": ("pass", 1.0), "greet_then_bash": ("fail", 0.5)}
    assert scores["one_turn"]["reason"] == "turns=2 max=1"
    assert scores["token_budget"]["reason"] == "tokens=730 max=1000"
    assert run["record_type"] == "dataset_run" and run["overall"] == "fail"
    assert (run["dataset_id"], run["case_id"]) == ("ds-1", "case_001")
    assert run["scores"]["greet_then_bash"] == 0.5 and "judge" not in run["scores"]
    assert "'llm_judge' is not yet implemented" in result.hook_log("murmur-hook-eval")
    assert faults(result) == []

    # and `mur eval show` reads it
    from mur.eval.file import show

    summary, _, path = show(None, result.session.parent)
    assert path == result.accessible / "eval.jsonl"
    assert summary["overall"] == "fail" and summary["scorers"]["tool_order"]["pass_rate"] == 1.0


def test_eval_hook_without_config_or_without_a_grant(hello_capsule, make_hook, eval_wasm):
    path = make_hook("murmur-hook-eval", eval_wasm)
    result = run_session(hello_capsule([hook_entry("murmur-hook-eval", path)]), "Ada")
    assert result.status == "ok" and faults(result) == []
    assert "MURMUR_EVAL_CONFIG is not set" in result.hook_log("murmur-hook-eval")
    assert not (result.accessible / "eval.jsonl").exists()

    extra = {"observability": {"eval": {"scorers": [{"type": "exit_ok", "name": "ok"}]}}}
    result = run_session(hello_capsule([hook_entry("murmur-hook-eval", path)], extra), "Ada")
    assert result.status == "ok"  # the hook's failure never fails the session
    assert faults(result) == [("murmur-hook-eval", "on-session-end", "error")]
    assert "grant it `capabilities: {filesystem: {scope: .}}`" in result.hook_log("murmur-hook-eval")


# --- decisions: reopen-task, replace-context, artifact, run-inference ---------------------------------


def test_reopen_task_reruns_the_task_with_the_hook_feedback(http_capsule, model_server, make_hook, probe_wasm):
    server = model_server([
        {"text": "Ada.", "usage": {"input_tokens": 100, "output_tokens": 3}},
        {"text": "Ada Lovelace, 1815-1852, wrote the first program.",
         "usage": {"input_tokens": 150, "output_tokens": 12}},
    ])
    hook = hook_entry("probe-reopen", make_hook("probe-reopen", probe_wasm, binding="on-task-end",
                                                commit_policy="reopen-task"))
    result = run_session(http_capsule(server.url, [hook]), "Who was Ada?")
    assert result.status == "ok", result.error
    [reopened] = result.events("task_reopened")
    assert (reopened["hook_name"], reopened["reason"], reopened["reopen_number"]) == \
        ("probe-reopen", "attempt 1 was not detailed enough", 1)
    assert reopened["task_id"] == result.events("task_start")[0]["task_id"]
    assert (result.session / "out" / "result.txt").read_text() == "Ada Lovelace, 1815-1852, wrote the first program."
    second = json.dumps(server.message_requests()[1].body["messages"])
    assert "Who was Ada?" in second and "attempt 1 was not detailed enough" in second
    calls = [x["data"] for x in result.probe_lines("probe-reopen") if x["event"] == "on-task-end"]
    assert [c["calls"] for c in calls] == [1, 2]  # once per attempt; the trace's task_end did not add a third
    assert [e["exit_status"] for e in result.events("task_end")] == ["ok"]


def test_reopen_budget_exhausted_fails_the_task(http_capsule, model_server, make_hook, probe_wasm):
    server = model_server([{"text": "a"}, {"text": "b"}])
    hook = hook_entry("probe-reopenall", make_hook("probe-reopenall", probe_wasm, binding="on-task-end",
                                                   commit_policy="reopen-task"))
    result = run_session(http_capsule(server.url, [hook], inference={"max_task_reopens": 1}), "t")
    assert result.status == "failed"
    assert len(result.events("task_reopened")) == 1
    assert "inference.max_task_reopens: 1" in result.error.message


def test_replace_context_compaction_through_a_hook(http_capsule, model_server, make_hook, probe_wasm):
    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 850, "output_tokens": 50}},
        {"text": "The user wants Ada greeted.", "usage": {"input_tokens": 200, "output_tokens": 8}},  # the hook's call
        {"text": "Done: Hello, Ada!", "usage": {"input_tokens": 120, "output_tokens": 6}},
    ])
    hook = hook_entry("probe-compact", make_hook("probe-compact", probe_wasm, binding="on-compaction",
                                                 commit_policy="replace-context"))
    manifest = http_capsule(server.url, [hook], inference={"compaction": {"threshold": 0.8, "model": "claude-small",
                                                                          "system_prompt": "keep it short"}},
                            extra={"context": {"max_tokens": 1000}})
    result = run_session(manifest, "Greet Ada")
    assert result.status == "ok", result.error
    [compaction] = result.events("compaction")
    assert compaction["tokens_before"] == 900
    [hook_call] = [e for e in result.events("inference") if e.get("origin")]
    assert hook_call["origin"] == "hook:probe-compact"
    assert (hook_call["input_tokens"], hook_call["output_tokens"]) == (200, 8)
    requests = server.message_requests()
    assert requests[1].body["system"] == "keep it short" and requests[1].body["model"] == "claude-small"
    assert requests[1].body["max_tokens"] == 8192
    final = requests[2].body["messages"]
    assert json.dumps(final[0]).count("Compacted: The user wants Ada greeted.") == 1
    assert "Greet Ada" not in json.dumps(final[0])  # the original conversation was replaced
    [event] = [x["data"] for x in result.probe_lines("probe-compact") if x["event"] == "on-compaction"]
    assert (event["tokens"], event["threshold"], event["model"], event["system_prompt"]) == \
        (900, 0.8, "claude-small", "keep it short")
    # on-inference observers never see the hook's own completion: inference trace events with origin are skipped
    assert (result.session / "out" / "result.txt").read_text() == "Done: Hello, Ada!"


def test_a_failing_compaction_hook_fails_the_session(http_capsule, model_server, make_hook, probe_wasm):
    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 950, "output_tokens": 50}},
    ])
    hook = hook_entry("probe-cfail", make_hook("probe-cfail", probe_wasm, binding="on-compaction",
                                               commit_policy="replace-context"))
    manifest = http_capsule(server.url, [hook], inference={"compaction": {"threshold": 0.8}},
                            extra={"context": {"max_tokens": 1000}})
    result = run_session(manifest, "Greet Ada")
    assert result.status == "failed"
    assert "compaction failed: on-compaction hook 'probe-cfail' failed: probe refuses to compact" in result.error.message
    assert faults(result) == [("probe-cfail", "on-compaction", "error")]


def test_artifact_arm_and_run_inference(http_capsule, model_server, make_hook, probe_wasm):
    server = model_server([
        {"text": "hook answer", "usage": {"input_tokens": 7, "output_tokens": 2}},  # probe-infer's on-session-start
        {"text": "agent answer", "usage": {"input_tokens": 50, "output_tokens": 4}},
    ])
    artifacts = []
    hooks = [hook_entry("probe-infer", make_hook("probe-infer", probe_wasm)),
             hook_entry("probe-artifact", make_hook("probe-artifact", probe_wasm, binding="on-inference"))]
    result = run_session(http_capsule(server.url, hooks), "hi",
                         hook_kwargs={"on_artifact": lambda name, payload: artifacts.append((name, payload))})
    assert result.status == "ok", result.error
    [start] = [x for x in result.probe_lines("probe-infer") if x["event"] == "on-session-start"]
    assert start["data"]["infer"] == {"ok": {"text": "hook answer", "model": "claude-haiku-4-5", "in": 7, "out": 2}}
    assert server.message_requests()[0].body["system"] == "be brief"
    assert artifacts == [("probe-artifact", '{"turn": 0}')]
    infer_events = result.events("inference")
    assert [e.get("origin") for e in infer_events] == ["hook:probe-infer", None]
    # the hook's completion is not an agent turn
    assert result.events("session_end")[0]["total_turns"] == 1
    env = [x for x in result.probe_lines("probe-infer") if x["event"] == "on-session-start"][0]
    assert env["data"]["ctx"]["model"] == "claude-haiku-4-5"


def test_async_overflow_and_drain_timeout_are_traced(hello_capsule, make_hook, probe_wasm):
    release = threading.Event()

    class BlockingClient:
        def complete(self, request):
            release.wait(20)
            return {"content": [{"type": "text", "text": "late"}], "usage": {}}

    path = make_hook("probe-infer", probe_wasm, execution_mode="async")
    try:
        result = run_session(hello_capsule([hook_entry("probe-infer", path)]), "Ada", model_client=BlockingClient(),
                             hook_kwargs={"queue_depth": 2, "drain_timeout": 0.5})
    finally:
        release.set()
    assert result.status == "ok"
    # The first two events always fit the queue, so on-session-start reaches the hook and blocks in
    # run-inference; five events cannot all fit behind it, and the drain cannot finish in 0.5 s.
    got = faults(result)
    assert got[-1] == ("probe-infer", "drain", "timeout")
    assert got[:-1] and all(arm == "queue-overflow" for _, _, arm in got[:-1]), got
    assert "queue is full; the event was dropped" in result.hook_log("probe-infer")
    assert "session-end drain budget" in result.hook_log("probe-infer")


@pytest.mark.requires_root
@pytest.mark.requires_landlock
def test_on_stage_write_manifests_describes_shell_tools(hello_capsule, make_hook, probe_wasm):
    hook = hook_entry("probe-stage", make_hook("probe-stage", probe_wasm, binding="on-stage",
                                               commit_policy="write-manifests"))
    result = run_session(hello_capsule([hook], {"capabilities": {"shell": {"allow": ["bash"]},
                                                                 "limits": {"deadline_seconds": 30}}}), "Ada")
    assert result.status == "ok", result.error
    manifest = (result.accessible / "tools" / "bash" / "murmur.yaml").read_text()
    assert "description: probe-described bash" in manifest
    [stage] = [x for x in result.probe_lines("probe-stage") if x["event"] == "on-stage"]
    assert stage["data"] == {"shell_allow": ["bash"]}
    assert [x["event"] for x in result.probe_lines("probe-stage")] == ["on-stage"]  # bound to on-stage only
