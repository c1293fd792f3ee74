"""transport: process with the real claude CLI (npm) against the loopback model server."""

from __future__ import annotations

import time

import pytest

from mur.errors import MurError
from mur.inference.process import run_process_transport
from mur.inference.prompts import UNTRUSTED_CONTENT_NOTICE

pytestmark = pytest.mark.requires_claude


def run(server, claude_env, tmp_path, *, max_turns=5, timeout=60.0, system_prompt="Answer briefly."):
    events: list[dict] = []
    workdir = tmp_path / "session"
    workdir.mkdir(exist_ok=True)
    outcome = run_process_transport("Say hello.", command="claude", model="claude-haiku-4-5", max_turns=max_turns,
                                    system_prompt=system_prompt, workdir=workdir, env=claude_env(server),
                                    trace=events.append, timeout=timeout)
    return outcome, events, workdir


def test_result_text_flags_and_system_prompt(model_server, claude_env, tmp_path):
    server = model_server([{"text": "Hello from the loopback model.", "usage": {"input_tokens": 50, "output_tokens": 7}}])
    outcome, events, workdir = run(server, claude_env, tmp_path)
    assert outcome.exit_status == "ok" and outcome.result == "Hello from the loopback model."
    assert (workdir / "out" / "result.txt").read_text() == "Hello from the loopback model."
    assert (outcome.turns, outcome.input_tokens, outcome.output_tokens) == (1, 0, 0)  # spec: tokens are 0
    assert events == [{"event_type": "inference", "turn": 0, "input_tokens": 0, "output_tokens": 0,
                       "decision": "end_turn", "tool_name": None}]
    request = server.message_requests()[0]
    assert request.path == "/v1/messages" and request.streamed
    assert request.body["model"] == "claude-haiku-4-5"
    assert request.headers["x-api-key"] == "sk-ant-loopback-test"
    system = "".join(b.get("text", "") for b in request.body["system"])
    assert UNTRUSTED_CONTENT_NOTICE in system and "Answer briefly." in system
    assert not request.body.get("tools")  # --tools "": the CLI's own tools are off
    texts = [b.get("text", "") for m in request.body["messages"] for b in m["content"] if isinstance(b, dict)]
    assert any("Say hello." in t for t in texts)


def test_multi_turn_counts_turns_and_traces_tool_calls(model_server, claude_env, tmp_path):
    server = model_server([
        {"tool_use": {"name": "Bash", "input": {"command": "ls"}}, "usage": {"input_tokens": 60, "output_tokens": 9}},
        {"tool_use": {"name": "Read", "input": {"file_path": "/etc/hostname"}}, "text": "one more"},
        {"text": "finished after two tool attempts"},
    ])
    outcome, events, _ = run(server, claude_env, tmp_path)
    assert outcome.exit_status == "ok" and outcome.result == "finished after two tool attempts"
    assert outcome.turns == 3 and outcome.tool_calls == 2
    decisions = [(e["turn"], e["decision"], e["tool_name"]) for e in events if e["event_type"] == "inference"]
    assert decisions == [(0, "tool_call", "Bash"), (1, "tool_call", "Read"), (2, "end_turn", None)]
    tools = [e for e in events if e["event_type"] == "tool_call"]
    # the tools are switched off, so the CLI answers each call with an error result itself
    assert [(t["turn"], t["tool_name"], t["status"]) for t in tools] == [(0, "Bash", "error"), (1, "Read", "error")]
    assert len(server.message_requests()) == 3


def test_max_turns_kills_the_cli(model_server, claude_env, tmp_path):
    server = model_server([{"tool_use": {"name": "Bash", "input": {"command": "ls"}}, "repeat": 6}])
    outcome, events, workdir = run(server, claude_env, tmp_path, max_turns=2)
    assert outcome.exit_status == "max_turns_reached" and outcome.turns == 2
    assert outcome.result == "error: inference loop exceeded 2 turns"
    assert (workdir / "out" / "result.txt").read_text() == outcome.result
    assert len([e for e in events if e["event_type"] == "inference"]) == 2
    time.sleep(0.5)
    assert len(server.message_requests()) == 3  # the third reply opened the turn that was refused


def test_timeout(model_server, claude_env, tmp_path):
    server = model_server([{"text": "far too late", "delay": 30}])
    started = time.monotonic()
    outcome, _, workdir = run(server, claude_env, tmp_path, timeout=4)
    assert time.monotonic() - started < 15
    assert outcome.exit_status == "failed" and outcome.error.startswith("inference subprocess timed out after 4s")
    assert (workdir / "out" / "result.txt").read_text().startswith("error: inference subprocess timed out")


def test_provider_error_reaches_the_result(model_server, claude_env, tmp_path):
    server = model_server([{"error": {"status": 400, "message": "max_tokens: 999999 > 64000, which is the maximum allowed"}, "repeat": 5}])
    outcome, _, _ = run(server, claude_env, tmp_path)
    assert outcome.exit_status == "failed"
    assert "claude returned an error" in outcome.error and "max_tokens: 999999 > 64000, which is the maximum allowed" in outcome.error


def test_command_not_on_path_is_e_run_006(claude_bin, tmp_path, monkeypatch):
    from mur.manifest import load_capsule
    from mur.session import launch_checks

    manifest = tmp_path / "murmur.yaml"
    manifest.write_text("name: c\nversion: '1'\ninference:\n  transport: process\n  model: m\n")
    capsule = load_capsule(manifest).capsule
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MurError) as err:
        launch_checks.check_inference(capsule, {})
    assert err.value.code == "E-RUN-006" and "claude CLI" in err.value.hint
    monkeypatch.setenv("PATH", str(__import__("pathlib").Path(claude_bin).parent))
    assert launch_checks.check_inference(capsule, {})


def test_should_stop_ends_the_cli_between_reads(model_server, claude_env, tmp_path):
    """tasks/cancel (or SIGTERM) on the process transport: the real CLI is stopped, fast, and the
    outcome says why."""
    server = model_server([{"text": "far too late", "delay": 30}])
    workdir = tmp_path / "session"
    workdir.mkdir()
    asked_at = time.monotonic() + 2.0

    def should_stop():
        return "task canceled by the client" if time.monotonic() >= asked_at else None

    started = time.monotonic()
    outcome = run_process_transport("Say hello.", command="claude", model="claude-haiku-4-5", max_turns=5,
                                    system_prompt=None, workdir=workdir, env=claude_env(server),
                                    trace=lambda e: None, timeout=60, should_stop=should_stop)
    assert time.monotonic() - started < 15
    assert outcome.exit_status == "failed" and outcome.stopped
    assert outcome.error == "task canceled by the client"
    assert (workdir / "out" / "result.txt").read_text() == "error: task canceled by the client"
