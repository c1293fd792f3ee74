"""`mur run` end to end with both inference transports against a loopback model server.

The http capsule is the issue's judge: the murmur-driver-anthropic component, one WASM tool
(examples/hello/greet) and one shell tool (bash, in the kernel sandbox) finishing a scripted
multi-turn task, with trace token totals equal to what the server served.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mur.trace.reader import load_events

ROOT = Path(__file__).resolve().parents[2]
DRIVER_DIR = ROOT / "examples" / "murmur-driver-anthropic"
GREET_DIR = ROOT / "examples" / "hello" / "greet"
MUR = [sys.executable, "-m", "mur"]
SOURCES = {"driver": DRIVER_DIR, "greet": GREET_DIR}


def write_capsule(path: Path, server_url: str, *, extra: str = "", shell: bool = False, inference: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    shell_caps = "  shell:\n    allow: [bash]\n" if shell else ""
    inference = inference or f"""
inference:
  transport: http
  endpoint: {server_url}
  model: claude-haiku-4-5
  api_key: ${{LOOPBACK_API_KEY}}
  max_tokens: 2048
  driver:
    artifact: murmur-driver-anthropic
"""
    (path / "murmur.yaml").write_text(f"""
name: inference-demo
version: "0.1.0"
artifacts:
  - name: murmur-driver-anthropic
    runtime: driver
    source: {SOURCES["driver"]}
    local_source: true
  - name: greet
    runtime: tool
    source: {SOURCES["greet"]}
    local_source: true
capabilities:
  network:
    allow: ["127.0.0.1"]
{shell_caps}{inference}{extra}""")
    return path / "murmur.yaml"


def mur_run(manifest: Path, task: str, env: dict[str, str] | None = None, timeout: float = 180):
    run_env = {**os.environ, "LOOPBACK_API_KEY": "sk-ant-loopback", **(env or {})}
    proc = subprocess.run(MUR + ["run", "--json", "--no-env-file", "-m", str(manifest), "-t", task],
                          capture_output=True, text=True, env=run_env, timeout=timeout, cwd=manifest.parent)
    info = json.loads(proc.stdout.splitlines()[0]) if proc.stdout.strip() else {}
    return proc, info


def read_trace(workdir: Path) -> list[dict]:
    return load_events(workdir / "trace.jsonl")


def session_dir(info: dict) -> Path:
    workdir = Path(info["workdir"])
    nested = workdir / ".murmur" / info["session_id"]
    return nested if nested.is_dir() else workdir


@pytest.fixture(autouse=True)
def _components(driver_wasm, greet_wasm, tmp_path, monkeypatch):
    """Copies of the driver and greet sources with their built .wasm beside them (local-source
    staging reads it there); the builds come from mur.wasm.build's cache, examples/ is not touched."""
    import shutil

    from mur.wasm.build import build_guest_dir

    dirs = {}
    for name, src in (("driver", DRIVER_DIR), ("greet", GREET_DIR)):
        dest = tmp_path / "artifacts" / src.name
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.wasm", "__pycache__"))
        build_guest_dir(dest)
        dirs[name] = dest
    monkeypatch.setitem(SOURCES, "driver", dirs["driver"])
    monkeypatch.setitem(SOURCES, "greet", dirs["greet"])


@pytest.mark.requires_root
@pytest.mark.requires_landlock
def test_http_capsule_with_wasm_and_shell_tools(model_server, tmp_path):
    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 320, "output_tokens": 17}},
        {"tool_use": {"name": "bash", "input": {"command": "echo shell-says-hi"}},
         "usage": {"input_tokens": 410, "output_tokens": 22}},
        {"text": "Greeted Ada; the shell said hi.", "usage": {"input_tokens": 530, "output_tokens": 10}},
    ])
    manifest = write_capsule(tmp_path / "capsule", server.url, shell=True)
    proc, info = mur_run(manifest, "Greet Ada, then say hi from the shell.")
    assert proc.returncode == 0, proc.stderr
    session = session_dir(info)
    assert (session / "out" / "result.txt").read_text() == "Greeted Ada; the shell said hi."
    trace = read_trace(session)
    end = next(e for e in trace if e["event_type"] == "session_end")
    served = server.served_usage()
    assert (end["total_input_tokens"], end["total_output_tokens"]) == (served["input_tokens"], served["output_tokens"])
    assert (end["total_turns"], end["total_tool_calls"], end["total_shell_calls"], end["exit_status"]) == (3, 2, 1, "ok")
    inference = [e for e in trace if e["event_type"] == "inference"]
    assert [e["tool_name"] for e in inference] == ["greet", "bash", None]
    tools = {e["tool_name"]: e for e in trace if e["event_type"] == "tool_call"}
    assert tools["greet"]["status"] == "ok" and tools["bash"]["status"] == "ok"
    shell = next(e for e in trace if e["event_type"] == "shell")
    assert shell["exit_code"] == 0 and shell["command"] == "echo shell-says-hi"
    first, second, third = server.message_requests()
    assert first.body["max_tokens"] == 2048 and first.headers["x-api-key"] == "sk-ant-loopback"
    assert {t["name"] for t in first.body["tools"]} == {"greet", "bash"}
    assert "Hello, Ada!" in json.dumps(second.body["messages"][-1])
    assert "shell-says-hi" in json.dumps(third.body["messages"][-1])


def test_http_capsule_compaction_is_left_to_a_hook(model_server, tmp_path):
    # The spec and upstream v0.2: compaction is the on-compaction hook's job. Without one the budget
    # being reached is logged and the conversation goes on unchanged: no summarising call of mur's own
    # (a hook that compacts: integration/hooks/test_hooks_session.py).
    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 700, "output_tokens": 100}},
        {"text": "All done.", "usage": {"input_tokens": 820, "output_tokens": 4}},
    ])
    extra = "context:\n  max_tokens: 1000\n"
    inference = f"""
inference:
  transport: http
  endpoint: {server.url}
  model: claude-haiku-4-5
  driver:
    artifact: murmur-driver-anthropic
  compaction:
    threshold: 0.8
    model: claude-compactor
    system_prompt: Summarise for a colleague.
    dump_summaries: true
"""
    manifest = write_capsule(tmp_path / "capsule", server.url, extra=extra, inference=inference)
    proc, info = mur_run(manifest, "Greet Ada.")
    assert proc.returncode == 0, proc.stderr
    session = session_dir(info)
    trace = read_trace(session)
    assert not [e for e in trace if e["event_type"] == "compaction"]
    assert not (session / "out" / "compaction-summaries.jsonl").exists()
    assert [r.body["model"] for r in server.message_requests()] == ["claude-haiku-4-5", "claude-haiku-4-5"]
    assert ("[compaction] threshold reached but no hook returned replace-context; continuing without compaction"
            in (session / "logs" / "bootstrap.log").read_text())
    end = next(e for e in trace if e["event_type"] == "session_end")
    assert (end["total_input_tokens"], end["total_output_tokens"]) == tuple(server.served_usage().values())


def test_http_provider_failure_is_a_failed_session(model_server, tmp_path):
    server = model_server([{"error": {"status": 401, "message": "invalid x-api-key"}}])
    manifest = write_capsule(tmp_path / "capsule", server.url)
    proc, info = mur_run(manifest, "Greet Ada.")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1 and proc.stderr.rstrip().endswith(
        "error[E-RUN-016]: inference provider failed: HTTP 401: authentication_error: invalid x-api-key\n"
        "  hint: the provider refused the credentials: check the API key the capsule passes (capabilities.env.allow)")
    session = session_dir(info)
    result = (session / "out" / "result.txt").read_text()
    assert result == "error: inference provider failed: HTTP 401: authentication_error: invalid x-api-key"
    end = next(e for e in read_trace(session) if e["event_type"] == "session_end")
    assert end["exit_status"] == "failed"


def test_unreadable_system_prompt_file_stops_before_any_call(model_server, tmp_path):
    server = model_server([{"text": "never"}])
    inference = f"""
inference:
  transport: http
  endpoint: {server.url}
  model: claude-haiku-4-5
  system_prompt_file: missing-prompt.md
  driver:
    artifact: murmur-driver-anthropic
"""
    manifest = write_capsule(tmp_path / "capsule", server.url, inference=inference)
    proc, _ = mur_run(manifest, "Greet Ada.")
    assert proc.returncode == 1 and "error[E-RUN-009]" in proc.stderr and "missing-prompt.md" in proc.stderr
    assert server.requests == []


def test_missing_driver_is_e_run_005(model_server, tmp_path):
    server = model_server([])
    inference = f"\ninference:\n  transport: http\n  endpoint: {server.url}\n  model: claude-haiku-4-5\n"
    manifest = write_capsule(tmp_path / "capsule", server.url, inference=inference)
    proc, _ = mur_run(manifest, "x")
    assert proc.returncode == 1 and "error[E-RUN-005]" in proc.stderr


def process_capsule(path: Path, command: str = "claude") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "murmur.yaml").write_text(f"""
name: cli-demo
version: "0.1.0"
inference:
  transport: process
  command: {command}
  model: claude-haiku-4-5
  max_turns: 4
  system_prompt: Answer in one line.
""")
    return path / "murmur.yaml"


@pytest.mark.requires_claude
def test_process_transport_with_the_claude_cli(model_server, claude_env, tmp_path):
    server = model_server([
        {"tool_use": {"name": "Bash", "input": {"command": "ls"}}},
        {"text": "Finished through the CLI."},
    ])
    manifest = process_capsule(tmp_path / "capsule")
    proc, info = mur_run(manifest, "Do the thing.", env=claude_env(server))
    assert proc.returncode == 0, proc.stderr
    workdir = Path(info["workdir"])
    results = list(workdir.rglob("out/result.txt"))
    assert [p.read_text() for p in results] == ["Finished through the CLI."]
    trace = read_trace(session_dir(info))
    end = next(e for e in trace if e["event_type"] == "session_end")
    assert (end["total_turns"], end["total_input_tokens"], end["total_output_tokens"], end["exit_status"]) == (2, 0, 0, "ok")
    assert [e["decision"] for e in trace if e["event_type"] == "inference"] == ["tool_call", "end_turn"]


def test_process_command_missing_is_e_run_006_before_the_workdir(tmp_path):
    manifest = process_capsule(tmp_path / "capsule", command="no-such-claude-cli")
    proc, _ = mur_run(manifest, "x")
    assert proc.returncode == 1 and "error[E-RUN-006]" in proc.stderr and "claude CLI" in proc.stderr
    assert not (tmp_path / "capsule" / "workdir").exists()


def test_cancel_a_running_agent_task_stops_it_before_its_tool_call(model_server, tmp_path):
    """tasks/cancel on an executing agent task: the model call in flight completes, the tool call
    it asked for is never made, the task ends canceled, and the queue capsule keeps serving."""
    from mur.a2a.client import A2AClient

    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "delay": 3},
        {"text": "second task done"},
    ])
    manifest = write_capsule(tmp_path / "capsule", server.url)
    env = {**os.environ, "LOOPBACK_API_KEY": "sk-ant-loopback", "MURMUR_A2A_TIMEOUT_SECS": "0"}
    proc = subprocess.Popen(MUR + ["run", "--json", "--no-env-file", "-m", str(manifest),
                                   "--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=manifest.parent)
    try:
        info = json.loads(proc.stdout.readline())
        with A2AClient(info["url"]) as client:
            first = client.send("Greet Ada.")
            deadline = time.monotonic() + 60
            while not server.message_requests():
                assert time.monotonic() < deadline and proc.poll() is None, "the model was never called"
                time.sleep(0.05)
            cancel = subprocess.run(MUR + ["cancel", info["url"], first["id"]], capture_output=True, text=True,
                                    timeout=60)
            assert cancel.returncode == 0, cancel.stderr
            assert cancel.stdout == f"{first['id']} canceling (it stops before its next step)\n"
            done = client.wait(first["id"], timeout=60)
            assert done["status"]["state"] == "canceled"
            again = subprocess.run(MUR + ["cancel", info["url"], first["id"]], capture_output=True, text=True,
                                   timeout=60)
            assert again.returncode == 1 and "-32002" in again.stderr
            second = client.wait(client.send("Say done.")["id"], timeout=60)
            assert second["status"]["state"] == "completed"
            assert second["artifacts"][0]["parts"][0]["text"] == "second task done"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(server.message_requests()) == 2  # no second turn for the canceled task
    trace = read_trace(session_dir(info))
    assert not [e for e in trace if e["event_type"] == "tool_call"]  # greet was never called
    ends = [e for e in trace if e["event_type"] == "task_end"]
    assert [e["exit_status"] for e in ends] == ["failed", "ok"]


# --- Ctrl-C and what a terminal sees --------------------------------------------------------------


def _mur(manifest: Path, *args: str, env: dict[str, str] | None = None, tty: bool = False):
    from mur.testing.terminal import MurProcess

    run_env = {**os.environ, "LOOPBACK_API_KEY": "sk-ant-loopback", **(env or {})}
    return MurProcess("run", "--no-env-file", "-m", str(manifest), *args, cwd=manifest.parent, env=run_env, tty=tty)


def _processes(match) -> list[int]:
    """PIDs of the processes `match(/proc/<pid>)` accepts (ones gone meanwhile are skipped)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and match(entry):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _processes_with(marker: str) -> list[int]:
    """PIDs whose command line holds `marker`."""
    return _processes(lambda proc: marker in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())


def _processes_in(directory: Path) -> list[int]:
    """PIDs whose working directory is `directory` or below it."""
    return _processes(lambda proc: Path(os.readlink(proc / "cwd")).is_relative_to(directory))


def test_ctrl_c_during_a_model_call_ends_the_task_interrupted(model_server, tmp_path):
    """The driver is inside its http import (a ctypes callback) waiting for the model: Ctrl-C traps
    it there, no 'Exception ignored' noise, the trace says how it ended, exit 130."""
    server = model_server([{"text": "too late", "delay": 60}])
    manifest = write_capsule(tmp_path / "capsule", server.url)
    with _mur(manifest, "-t", "Greet Ada.") as mur:
        mur.wait_for(lambda: server.message_requests(), what="the model call")
        mur.ctrl_c()
        assert mur.finish(30) == 130  # the model answers only after 60 s
    lines = mur.stderr.splitlines()
    assert [lines[0][:13], lines[1][:9], lines[2:]] == ["murmur: url l", "session: ", ["status:  interrupted"]]
    assert mur.stdout == ""
    trace = read_trace(tmp_path / "capsule" / "workdir" / lines[1].removeprefix("session: "))
    ends = {e["event_type"]: e["exit_status"] for e in trace if e["event_type"] in ("session_end", "task_end")}
    assert ends == {"session_end": "interrupted", "task_end": "interrupted"}


@pytest.mark.requires_root
@pytest.mark.requires_landlock
def test_ctrl_c_during_a_shell_tool_leaves_no_process_behind(model_server, tmp_path):
    marker = "read -t 47.125"  # unique on this machine: what is left of it after the run is ours
    # Shell builtins only (the sandbox runs no binary but bash): a coprocess and a read that waits on it.
    command = f"coproc {{ read; }}; {marker} -u ${{COPROC[0]}}"
    server = model_server([{"tool_use": {"name": "bash", "input": {"command": command}}}, {"text": "never asked"}])
    manifest = write_capsule(tmp_path / "capsule", server.url, shell=True)
    with _mur(manifest, "--json", "-t", "Sleep.") as mur:
        mur.wait_for(lambda: _processes_with(marker), what="the sandboxed wait")
        mur.ctrl_c()
        assert mur.finish(30) == 130
    assert _processes_with(marker) == []
    first, last = (json.loads(line) for line in mur.stdout.splitlines())
    assert (last["status"], last["session_id"]) == ("interrupted", first["session_id"])
    assert mur.stderr.splitlines()[-1] == "interrupted" and "Exception ignored" not in mur.stderr  # after W-SEC-005
    assert len(server.message_requests()) == 1  # no turn after the interrupt


@pytest.mark.requires_claude
def test_ctrl_c_stops_the_claude_cli_too(model_server, claude_env, tmp_path):
    """The CLI runs in its own session (a terminal's Ctrl-C does not reach it): mur ends it."""
    server = model_server([{"text": "too late", "delay": 60}])
    manifest = process_capsule(tmp_path / "capsule")
    with _mur(manifest, "-t", "Say hi.", env=claude_env(server)) as mur:
        mur.wait_for(lambda: server.message_requests(), timeout=120, what="the CLI's model call")
        cli = [pid for pid in _processes_in(tmp_path / "capsule" / "workdir") if pid != mur.proc.pid]
        assert cli, "the claude CLI runs in the session's workdir"
        mur.ctrl_c()
        assert mur.finish(30) == 130
    assert mur.stderr.splitlines()[-1] == "status:  interrupted"
    assert [pid for pid in cli if Path(f"/proc/{pid}").exists()] == []


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "pipe"])
def test_a_provider_retry_shows_on_a_terminal_only(model_server, tmp_path, tty):
    server = model_server([{"error": {"status": 429, "message": "slow down", "retry_after": 1}},
                           {"text": "Done after one retry."}])
    manifest = write_capsule(tmp_path / "capsule", server.url)
    with _mur(manifest, "-t", "Greet Ada.", tty=tty) as mur:
        assert mur.finish(120) == 0, mur.stderr
    assert mur.stdout == "Done after one retry.\n"
    retry = "inference provider: HTTP 429: rate_limit_error: slow down; retry 1 of 3 in 1s"
    assert (retry in mur.stderr) == tty, mur.stderr
    if not tty:
        assert mur.stderr.splitlines()[2:] == ["status:  ok"]
