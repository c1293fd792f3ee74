"""transport: process without the claude CLI: PATH checks, argv, the stream-json reader, and the
subprocess plumbing (timeout, no result, garbage on stdout) driven by real programs."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from mur.inference.process import (
    _Stream,
    command_on_path,
    process_argv,
    run_process_transport,
    task_line,
)
from mur.inference.prompts import UNTRUSTED_CONTENT_NOTICE


def test_command_lookup(tmp_path):
    assert command_on_path("sh") is not None
    assert command_on_path("definitely-not-a-command-xyz") is None
    exe = tmp_path / "my-claude"
    exe.write_text("#!/bin/sh\n")
    assert command_on_path(str(exe)) is None  # not executable
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    assert command_on_path(str(exe)) == str(exe.resolve())
    assert command_on_path("my-claude", str(tmp_path)) == str(exe.resolve())
    assert command_on_path("claude", str(tmp_path / "empty")) is None  # E-RUN-006: tests/session/test_session_resolve.py


def test_argv_has_the_spec_flags_and_the_notice():
    argv = process_argv("/bin/claude", "claude-haiku-4-5", "Be brief.")
    assert argv[:10] == ["/bin/claude", "--print", "--output-format", "stream-json", "--verbose",
                         "--input-format", "stream-json", "--model", "claude-haiku-4-5", "--tools"]
    assert argv[10] == "" and argv[11] == "--system-prompt"
    assert UNTRUSTED_CONTENT_NOTICE in argv[12] and argv[12].endswith("Be brief.")
    assert "--model" not in process_argv("claude", " ", None)
    line = json.loads(task_line("do it"))
    assert line == {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "do it"}]}}


def assistant(msg_id, *blocks, model="claude-haiku-4-5"):
    return json.dumps({"type": "assistant", "message": {"id": msg_id, "model": model, "content": list(blocks)}})


def test_stream_counts_one_turn_per_inference_call():
    events = []
    stream = _Stream(max_turns=5, trace=events.append)
    lines = [
        json.dumps({"type": "system", "subtype": "init"}),
        assistant("m1", {"type": "thinking", "thinking": "hmm"}),  # thinking-only: no turn
        assistant("m1", {"type": "text", "text": "let me look"}),
        assistant("m1", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}),  # same call
        json.dumps({"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "a\nb", "is_error": False}]}}),
        assistant("synthetic-1", {"type": "text", "text": "API Error: 500"}, model="<synthetic>"),
        assistant("m2", {"type": "text", "text": "done"}),
        json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "done"}),
    ]
    finished = [stream.feed(line) for line in lines]
    assert finished == [False] * 7 + [True]
    assert stream.turns == 2 and stream.result == "done" and stream.error is None
    inference = [e for e in events if e["event_type"] == "inference"]
    assert [(e["turn"], e["decision"], e["tool_name"], e["input_tokens"]) for e in inference] == [
        (0, "tool_call", "Bash", 0), (1, "end_turn", None, 0)]
    tool = [e for e in events if e["event_type"] == "tool_call"]
    assert tool[0]["tool_name"] == "Bash" and tool[0]["turn"] == 0 and tool[0]["output_bytes"] == 3
    assert tool[0]["status"] == "ok" and tool[0]["input"] == {"command": "ls"}


def test_stream_budget_error_result_and_garbage():
    stream = _Stream(max_turns=1, trace=lambda e: None)
    assert not stream.feed(assistant("a", {"type": "tool_use", "id": "1", "name": "X", "input": {}}))
    assert stream.feed(assistant("b", {"type": "text", "text": "more"})) and stream.over_budget
    failing = _Stream(max_turns=3, trace=lambda e: None)
    assert failing.feed(json.dumps({"type": "result", "subtype": "success", "is_error": True,
                                    "result": "API Error: 401 invalid x-api-key"}))
    assert failing.error == "claude returned an error: API Error: 401 invalid x-api-key"
    assert _Stream(3, lambda e: None).feed(json.dumps({"type": "result", "subtype": "error_max_turns"}))
    garbage = _Stream(3, lambda e: None)
    assert garbage.feed("not json at all") and "malformed JSON" in garbage.error


def script(tmp_path, body: str):
    path = tmp_path / "fake-cli"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def run(tmp_path, command, **kw):
    events = []
    out = run_process_transport("task", command=command, model="m", max_turns=kw.pop("max_turns", 3),
                                system_prompt=None, workdir=tmp_path, env={"PATH": os.environ["PATH"]},
                                trace=events.append, **kw)
    return out, events


def test_timeout_kills_the_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    command = script(tmp_path, f"sleep 30 & echo $! > {pidfile}\nwait\n")
    started = time.monotonic()
    out, _ = run(tmp_path, command, timeout=1.0)
    assert time.monotonic() - started < 10
    assert out.exit_status == "failed" and out.error == "inference subprocess timed out after 1s"
    assert (tmp_path / "out" / "result.txt").read_text() == "error: inference subprocess timed out after 1s"
    child = int(pidfile.read_text())
    time.sleep(0.2)
    try:
        state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z")  # the backgrounded grandchild died with the group


def test_cli_exiting_without_a_result_fails_with_its_stderr(tmp_path):
    out, _ = run(tmp_path, script(tmp_path, "cat > /dev/null\necho 'no credentials configured' >&2\nexit 3\n"))
    assert out.exit_status == "failed"
    assert "closed stdout without producing a result (exit status 3)" in out.error
    assert "no credentials configured" in out.error


def test_garbage_on_stdout_fails(tmp_path):
    out, _ = run(tmp_path, script(tmp_path, "echo 'Welcome to the CLI!'\n"))
    assert out.exit_status == "failed" and "malformed JSON" in out.error


def test_task_reaches_stdin_and_result_is_written(tmp_path):
    body = (
        "read line\n"
        "echo \"$line\" > stdin.json\n"
        "echo '{\"type\":\"assistant\",\"message\":{\"id\":\"m\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}'\n"
        "echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"all done\"}'\n"
    )
    out, events = run(tmp_path, script(tmp_path, body))
    assert (out.exit_status, out.result, out.turns) == ("ok", "all done", 1)
    assert json.loads((tmp_path / "stdin.json").read_text())["message"]["content"][0]["text"] == "task"
    assert (tmp_path / "out" / "result.txt").read_text() == "all done"
    assert events == [{"event_type": "inference", "turn": 0, "input_tokens": 0, "output_tokens": 0,
                       "decision": "end_turn", "tool_name": None}]


def test_missing_command_at_spawn_is_e_run_006(tmp_path):
    out, _ = run(tmp_path, "no-such-cli-xyz")
    assert out.exit_status == "failed" and out.error_code == "E-RUN-006"
