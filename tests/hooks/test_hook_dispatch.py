"""HookSet dispatch logic with stand-in hook instances (the real components run in integration/hooks)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from wasmtime.component import Variant

from mur.errors import MurError
from mur.hooks.config import HookConfig
from mur.hooks.hookset import Hook, HookSet
from mur.hooks.instance import MISSING, HookLog
from mur.inference.compaction import CompactionRequest
from mur.inference.loop import LoopConfig, run_reopenable_task
from mur.session.hookwiring import describe_staged

NONE = Variant("none")


class FakeInstance:
    """Answers lifecycle calls from a table {fn: value | callable}; records every call."""

    def __init__(self, name, answers=None, calls=None):
        self.name = name
        self.answers = answers or {}
        self.calls = calls if calls is not None else []
        self.closed = False

    def call(self, fn, record):
        self.calls.append((self.name, fn, record))
        answer = self.answers.get(fn, NONE)
        return answer(record) if callable(answer) else answer

    def close(self):
        self.closed = True


def make_set(tmp_path, specs, **kw):
    """specs: [(name, HookConfig, answers)] -> (HookSet, trace events, shared call log)."""
    events, calls, hooks = [], [], []
    for name, config, answers in specs:
        hooks.append(Hook(name, config, FakeInstance(name, answers, calls), HookLog(tmp_path / f"hook-{name}.log")))
    hs = HookSet(hooks, emit=events.append, tools_dir=tmp_path / "tools", **kw)
    return hs, events, calls


def tool_call(turn=0, name="greet"):
    return {"event_type": "tool_call", "turn": turn, "tool_name": name, "input_bytes": 1, "output_bytes": 2,
            "duration_ms": 3, "status": "ok"}


def faults(events):
    return [(e["hook_name"], e["event"], e["arm"]) for e in events if e["event_type"] == "hook_dispatch_error"]


def test_blocking_hooks_run_in_declaration_order_and_async_after_close(tmp_path):
    hs, events, calls = make_set(tmp_path, [
        ("b-first", HookConfig(), {}),
        ("a-second", HookConfig(), {}),
        ("obs", HookConfig(execution_mode="async"), {}),
        ("tasks-only", HookConfig(binding="on-task-end"), {}),
    ])
    hs.on_event({"event_type": "task_start", "task_id": "tsk_1", "context_id": "c", "source": "a2a"})
    hs.on_event(tool_call())
    hs.close()
    blocking = [(n, fn) for n, fn, _ in calls if n != "obs"]
    assert blocking == [("b-first", "on-task-start"), ("a-second", "on-task-start"),
                        ("b-first", "on-tool-call"), ("a-second", "on-tool-call")]
    assert [(n, fn) for n, fn, _ in calls if n == "obs"] == [("obs", "on-task-start"), ("obs", "on-tool-call")]
    assert getattr(calls[2][2], "tool-name") == "greet"
    assert faults(events) == []
    assert all(h.instance.closed for h in hs.hooks)


def test_err_trap_and_unsupported_arm_are_logged_and_traced_never_raised(tmp_path):
    def trap(_record):
        raise MurError("E-RUN-001", "hook 'trapper' trapped: wasm trap: unreachable (guest: RuntimeError: boom)")

    hs, events, _ = make_set(tmp_path, [
        ("erring", HookConfig(), {"on-tool-call": "database unreachable"}),
        ("trapper", HookConfig(), {"on-tool-call": trap}),
        ("wrongarm", HookConfig(), {"on-tool-call": Variant("write-manifests", [])}),
        ("fine", HookConfig(), {}),
    ])
    hs.on_event(tool_call())
    assert faults(events) == [("erring", "on-tool-call", "error"), ("trapper", "on-tool-call", "error"),
                              ("wrongarm", "on-tool-call", "write-manifests")]
    assert (tmp_path / "hook-erring.log").read_text() == \
        "hook 'erring' on-tool-call returned an error: database unreachable\n"
    assert "RuntimeError: boom" in (tmp_path / "hook-trapper.log").read_text()
    assert "unsupported hook-output arm 'write-manifests' from 'on-tool-call'" in \
        (tmp_path / "hook-wrongarm.log").read_text()
    assert not (tmp_path / "hook-fine.log").exists()


def test_missing_optional_export_is_silent(tmp_path):
    hs, events, calls = make_set(tmp_path, [("old", HookConfig(), {"on-task-start": MISSING})])
    hs.on_event({"event_type": "task_start", "task_id": "t"})
    assert faults(events) == [] and len(calls) == 1


def test_async_queue_overflow_and_drain_timeout(tmp_path):
    release = threading.Event()
    entered = threading.Event()

    def slow(_record):
        entered.set()
        release.wait(10)
        return NONE

    hs, events, calls = make_set(tmp_path, [("slow", HookConfig(execution_mode="async"), {"on-tool-call": slow})],
                                 queue_depth=1, drain_timeout=0.3)
    hs.on_event(tool_call(0))
    assert entered.wait(5)  # the worker is now stuck inside the first call
    for turn in (1, 2, 3):
        hs.on_event(tool_call(turn))  # one fits in the queue, two overflow
    assert faults(events) == [("slow", "on-tool-call", "queue-overflow")] * 2
    hs.close()
    assert faults(events)[-1] == ("slow", "drain", "timeout")
    log = (tmp_path / "hook-slow.log").read_text()
    assert "discarded 2 lifecycle event(s)" in log and "session-end drain budget" in log
    assert not hs.hooks[0].instance.closed  # a stuck worker keeps its instance
    release.set()
    hs.hooks[0].worker.thread.join(5)
    assert not hs.hooks[0].worker.thread.is_alive()
    hs.on_event(tool_call(9))  # after close: ignored
    assert len(calls) == 1  # the call still queued at the timeout was abandoned, not run late


def test_on_task_end_reopen_and_no_second_dispatch_from_the_trace(tmp_path):
    hs, events, calls = make_set(tmp_path, [
        ("observer", HookConfig(), {}),
        ("judge", HookConfig(binding="on-task-end", commit_policy="reopen-task"),
         {"on-task-end": Variant("reopen-task", "cite a source")}),
        ("late", HookConfig(), {"on-task-end": Variant("reopen-task", "ignored: judge won")}),
    ])
    hs.on_event({"event_type": "task_start", "task_id": "tsk_9"})
    wish = hs.on_task_end(SimpleNamespace(exit_status="ok"))
    assert wish == ("judge", "cite a source")
    task_end_calls = [c for c in calls if c[1] == "on-task-end"]
    assert [c[0] for c in task_end_calls] == ["observer", "judge", "late"]
    assert getattr(task_end_calls[0][2], "task-id") == "tsk_9"
    hs.on_event({"event_type": "task_end", "task_id": "tsk_9", "exit_status": "ok"})
    assert len([c for c in calls if c[1] == "on-task-end"]) == 3  # the trace's task_end did not re-dispatch


def test_task_end_from_the_trace_when_no_reopen_path_ran(tmp_path):
    hs, events, calls = make_set(tmp_path, [("judge", HookConfig(), {"on-task-end": Variant("reopen-task", "x")})])
    hs.on_event({"event_type": "task_end", "task_id": "tsk_2", "exit_status": "ok"})
    assert [c[1] for c in calls] == ["on-task-end"]
    assert "did not run through the agent loop's reopen path" in (tmp_path / "hook-judge.log").read_text()


def request(messages=None):
    return CompactionRequest(messages=messages or [{"role": "user", "content": "task"}], task="task", turn=1,
                             tokens_before=900, threshold=0.8, context_max_tokens=1000, model=None,
                             system_prompt="be short")


def test_compactor_only_with_a_hook_that_can_commit_replace_context(tmp_path):
    hs, _, _ = make_set(tmp_path, [("obs", HookConfig(), {}), ("dbg", HookConfig(execution_mode="async"), {})])
    assert hs.compactor() is None
    hs, _, _ = make_set(tmp_path, [("c", HookConfig(binding="on-compaction", commit_policy="replace-context"), {})])
    assert hs.compactor() is not None
    hs, _, _ = make_set(tmp_path, [("c", HookConfig(commit_policy="replace-context"), {})])
    assert hs.compactor() is not None


def test_compactor_replaces_declines_and_fails(tmp_path):
    summary = [SimpleNamespace(role="user", content="Summary: greeted Ada")]
    hs, events, calls = make_set(tmp_path, [
        ("obs", HookConfig(), {}),
        ("c", HookConfig(binding="on-compaction", commit_policy="replace-context"),
         {"on-compaction": Variant("replace-context", summary)}),
    ])
    result = hs.compactor()(request())
    assert result.messages == [{"role": "user", "content": [{"type": "text", "text": "Summary: greeted Ada"}]}]
    assert result.summary == "Summary: greeted Ada" and result.model is None
    rec = calls[-1][2]
    assert getattr(rec, "session-tokens") == 900 and getattr(rec, "system-prompt") == "be short"

    hs, _, _ = make_set(tmp_path, [("c", HookConfig(binding="on-compaction"), {})])
    assert hs.compactor()(request()) is None  # every hook answered none: continue uncompacted

    hs, events, _ = make_set(tmp_path, [
        ("obs", HookConfig(), {"on-compaction": "observer broke"}),
        ("c", HookConfig(binding="on-compaction"), {"on-compaction": Variant("replace-context", summary)}),
    ])
    with pytest.raises(MurError) as info:
        hs.compactor()(request())
    assert info.value.message == "on-compaction hook 'obs' failed: observer broke"
    assert faults(events) == [("obs", "on-compaction", "error")]

    bad = [SimpleNamespace(role="system", content="x")]
    hs, _, _ = make_set(tmp_path, [("c", HookConfig(binding="on-compaction"),
                                    {"on-compaction": Variant("replace-context", bad)})])
    with pytest.raises(MurError, match="message role 'system'"):
        hs.compactor()(request())


class ScriptedClient:
    def __init__(self, texts):
        self.texts = list(texts)
        self.requests = []

    def complete(self, request):
        self.requests.append(request)
        return {"content": [{"type": "text", "text": self.texts.pop(0)}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 2}, "model": "tiny-1"}


class NoTools:
    def specs(self):
        return []

    def call(self, name, input, turn):
        raise AssertionError("no tools here")


def hooked_loop(hs, task, cfg, client, tools, trace, workdir=None):
    """The agent loop with the hooks' decisions wired in, as mur.session.executor runs it."""
    return run_reopenable_task(task, cfg, client, tools, trace, workdir=workdir, compactor=hs.compactor(),
                               on_task_end=hs.on_task_end, task_id=hs.current_task or "")


def test_agent_loop_reopens_with_feedback_then_finishes(tmp_path):
    answers = iter([Variant("reopen-task", "add detail"), NONE])
    hs, events, _ = make_set(tmp_path, [("judge", HookConfig(binding="on-task-end", commit_policy="reopen-task"),
                                         {"on-task-end": lambda _r: next(answers)})])
    hs.on_event({"event_type": "task_start", "task_id": "tsk_r"})
    client = ScriptedClient(["short", "long and detailed"])
    out = hooked_loop(hs, "Describe Ada", LoopConfig(model="m", max_turns=5, max_task_reopens=1), client,
                      NoTools(), events.append, workdir=tmp_path)
    assert (out.exit_status, out.result, out.turns, out.input_tokens) == ("ok", "long and detailed", 2, 20)
    reopened = [e for e in events if e["event_type"] == "task_reopened"]
    assert reopened == [{"event_type": "task_reopened", "task_id": "tsk_r", "hook_name": "judge",
                         "reason": "add detail", "reopen_number": 1}]
    second = client.requests[1]["messages"][0]["content"][0]["text"]
    assert second.startswith("Describe Ada") and "add detail" in second and "from hook `judge`" in second
    assert out.reopen_count == 1


def test_agent_loop_reopen_budget_exhausted(tmp_path):
    hs, events, _ = make_set(tmp_path, [("judge", HookConfig(), {"on-task-end": Variant("reopen-task", "more")})])
    out = hooked_loop(hs, "t", LoopConfig(model="m", max_turns=5, max_task_reopens=1), ScriptedClient(["a", "b"]),
                      NoTools(), events.append)
    assert out.exit_status == "reopen_budget_exhausted" and out.error_code == "E-RUN-007"
    assert "inference.max_task_reopens: 1" in out.error


def test_run_inference_for_hooks(tmp_path):
    client = ScriptedClient(["a summary"])
    hs, events, _ = make_set(tmp_path, [], model_client=client, default_model="claude-haiku-4-5")
    hs.turn = 3
    req = SimpleNamespace(messages=[SimpleNamespace(role="user", content="hi")], model=None)
    setattr(req, "system-prompt", "be brief")
    answer = hs.inference_for("summarizer")(req)
    assert answer == {"text": "a summary", "model_used": "tiny-1", "input_tokens": 10, "output_tokens": 2}
    assert client.requests == [{"model": "claude-haiku-4-5", "max_tokens": 8192, "system": "be brief",
                                "messages": [{"role": "user", "content": "hi"}]}]
    assert events == [{"event_type": "inference", "turn": 3, "tool_name": None, "origin": "hook:summarizer",
                       "input_tokens": 10, "output_tokens": 2, "decision": "end_turn", "model": "tiny-1"}]

    class Broken:
        def complete(self, request):
            raise MurError("E-RUN-016", "provider said no")

    hs, events, _ = make_set(tmp_path, [], model_client=Broken(), default_model="m")
    assert hs.inference_for("h")(req) == "provider said no"
    assert events[0]["decision"] == "error" and events[0]["error"] == "provider said no"
    hs, _, _ = make_set(tmp_path, [])
    assert hs.inference_for("h")(req) == "no inference driver is configured for this capsule"


def test_on_stage_writes_manifests_for_allowed_binaries_only(tmp_path):
    manifests = [SimpleNamespace(**{"binary-name": "bash", "content": "name: bash\ndescription: Run bash.\n"
                                                                    "input_schema: {type: object}\n"}),
                 SimpleNamespace(**{"binary-name": "../evil", "content": "name: x\n"}),
                 SimpleNamespace(**{"binary-name": "jq", "content": "name: [broken\n"})]
    staged = SimpleNamespace(tools={"bash": SimpleNamespace(description="old", input_schema={})})
    hs, events, calls = make_set(tmp_path, [
        ("describer", HookConfig(binding="on-stage", commit_policy="write-manifests"),
         {"on-stage": Variant("write-manifests", manifests)}),
        ("observer", HookConfig(), {}),  # an absent binding never gets on-stage
    ], on_manifest=describe_staged(staged))
    written = hs.on_stage(["bash", "jq"])
    assert written == [("bash", manifests[0].content)]
    assert (tmp_path / "tools" / "bash" / "murmur.yaml").read_text() == manifests[0].content
    assert not (tmp_path / "evil").exists()
    assert staged.tools["bash"].description == "Run bash."
    assert [c[0] for c in calls] == ["describer"]
    assert getattr(calls[0][2], "shell-allow") == ["bash", "jq"]
    log = (tmp_path / "hook-describer.log").read_text()
    assert "'../evil' ignored" in log and "'jq' is not valid YAML" in log
    assert events == []  # on-stage faults are logged only (upstream)
