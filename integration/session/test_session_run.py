"""`mur run` end to end on a real wasmtime host: layout, startup output, trace schema, statuses."""

from __future__ import annotations

import json
import re

import pytest

from session_support import read_trace, run_mur, session_dirs

SES = re.compile(r"^ses_[0-9a-f]{32}$")


def test_hello_runs_and_lays_out_the_workdir(hello, home):
    proc = run_mur("run", "--task", "Ada", cwd=hello, home=home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Hello, Ada!\n"  # the answer alone on stdout; the rest is for the person, on stderr
    lines = proc.stderr.splitlines()
    assert re.fullmatch(r"murmur: url localhost:\d+", lines[0])
    assert lines[1].startswith("session: ") and SES.match(lines[1].split(": ")[1])
    assert lines[2:] == ["status:  ok"]
    [wd] = session_dirs(hello)
    assert wd.name == lines[1].split(": ")[1]
    assert (wd / "out" / "result.txt").read_text().strip() == "Hello, Ada!"
    # the runtime's record in the session directory, the tools' files in its work/ (docs/run.md)
    for rel in ("trace.jsonl", "logs", "out/result.txt", "work/MURMUR.md", "work/task.md",
                "work/tools/greet/murmur.yaml", "work/out/result.txt"):
        assert (wd / rel).exists(), rel
    assert not (wd / "work" / "tools" / "greet" / "greet.wasm").exists()  # the engine compiles its own copy: none staged
    assert sorted(p.name for p in wd.iterdir()) == ["logs", "out", "trace.jsonl", "work"]
    md = (wd / "work" / "MURMUR.md").read_text()
    assert "## Installed Tools" in md and "**greet**" in md and wd.name in md and str(wd / "logs") in md


def test_json_startup_line_is_deploys_contract(hello, home):
    proc = run_mur("run", "--task", "Bo", "--json", cwd=hello, home=home)
    assert proc.returncode == 0, proc.stderr
    first, last = (json.loads(line) for line in proc.stdout.splitlines())
    assert list(first) == ["url", "pid", "session_id", "name", "version", "workdir"]
    assert re.fullmatch(r"localhost:\d+", first["url"]) and SES.match(first["session_id"])
    assert (first["name"], first["version"]) == ("hello", "0.1.0")
    assert (hello / "workdir" / first["session_id"]) == __import__("pathlib").Path(first["workdir"])
    assert last == {"status": "ok", "session_id": first["session_id"], "result": "Hello, Bo!\n",
                    "result_path": f"{first['workdir']}/out/result.txt"}
    assert proc.stderr == ""


def test_json_ending_of_a_failed_session_names_the_error(hello, home):
    (hello / "capsule.wasm").write_bytes(b"\0asm\x0d\0\x01\0")  # a component header and nothing else
    proc = run_mur("run", "--task", "Bo", "--json", cwd=hello, home=home)
    assert proc.returncode == 1
    first, last = (json.loads(line) for line in proc.stdout.splitlines())
    assert (last["status"], last["session_id"], last["result"]) == ("trapped", first["session_id"], None)
    assert last["error"]["code"] == "E-RUN-001" and proc.stderr.startswith("error[E-RUN-001]: ")


def test_trace_lines_follow_the_schema(hello, home):
    assert run_mur("run", "--task", "Cy", cwd=hello, home=home).returncode == 0
    [wd] = session_dirs(hello)
    events = read_trace(wd / "trace.jsonl")
    kinds = [e["event_type"] for e in events]
    assert kinds == ["task_start", "session_start", "tool_call", "session_end", "task_end"]
    assert {e["session_id"] for e in events} == {wd.name}
    stamps = [e["timestamp"] for e in events]
    assert all(isinstance(t, int) and t > 1_600_000_000_000 for t in stamps) and stamps == sorted(stamps)
    start = events[1]
    for key, kind in {
        "capsule_name": str, "capsule_version": str, "max_turns": int, "capabilities": list,
        "tools_declared": list, "containment_declared": str, "containment_achieved": str, "workdir_exec": bool,
        "system_prompt_source": str, "effective_grants": dict,
    }.items():
        assert isinstance(start[key], kind), key
    assert "model" in start and "system_prompt_sha256" in start
    from mur.sandbox.probe import probe_host

    # the host's class (sealed where a composed root and a session disk can be built, else scoped)
    assert start["containment_declared"] == "advisory" and start["containment_achieved"] == probe_host().achieved
    assert start["containment_achieved"] in ("scoped", "sealed")
    assert start["tools_declared"] == ["greet"]
    grants = start["effective_grants"]
    assert grants["enforcement_tier"] == probe_host().mechanism and grants["floor_met"] is True
    assert grants["enforcement_tier"].endswith("landlock+seccomp")
    assert grants["env_allow"] == ["HELLO_GREETING"]
    call = events[2]
    assert call["tool_name"] == "greet" and call["status"] == "ok" and call["input"] == {"name": "Cy"}
    assert isinstance(call["input_bytes"], int) and call["input_bytes"] >= len('{"name":"Cy"}')
    assert isinstance(call["output_bytes"], int) and isinstance(call["duration_ms"], int)
    assert "output" not in call  # only with trace.include_tool_output
    end = events[3]
    assert end["exit_status"] == "ok" and end["total_tool_calls"] == 1 and end["total_shell_calls"] == 0
    for key in ("total_turns", "total_input_tokens", "total_output_tokens", "duration_ms"):
        assert isinstance(end[key], int)


def test_workdir_flag_keeps_the_session_directory_out_of_the_tools_reach(hello, home, tmp_path):
    target = tmp_path / "wd"
    proc = run_mur("run", "--task", "Di", "--workdir", str(target), "--json", cwd=hello, home=home)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.splitlines()[0])
    ses = info["session_id"]
    assert (target / "task.md").read_text() == "Di" and (target / "MURMUR.md").is_file()
    assert not (target / ".murmur").exists()  # upstream's DIR/.murmur/<id> would be tool-writable
    session = hello / "workdir" / ses
    assert info["workdir"] == str(session)
    assert (session / "trace.jsonl").is_file() and not (session / "work").exists()
    assert (session / "out" / "result.txt").read_text().strip() == "Hello, Di!"


def test_a_workdir_holding_the_session_directories_keeps_the_session_in_murs_home(hello, home):
    target = hello / "workdir"
    proc = run_mur("run", "--task", "Ed", "--workdir", str(target), "--json", cwd=hello, home=home)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.splitlines()[0])
    session = home / ".murmur" / "sessions" / info["session_id"]
    assert info["workdir"] == str(session) and (session / "trace.jsonl").is_file()
    assert (target / "task.md").read_text() == "Ed" and not (target / info["session_id"]).exists()
    shown = run_mur("trace", "show", info["session_id"], cwd=hello, home=home)
    assert shown.returncode == 0 and info["session_id"] in shown.stdout, shown.stderr


@pytest.mark.parametrize("what", ["manifest", "home"])
def test_a_workdir_holding_the_manifest_or_murs_home_is_refused_before_anything_is_created(hello, home, what):
    target = hello if what == "manifest" else home
    proc = run_mur("run", "--task", "Fy", "--workdir", str(target), cwd=hello, home=home)
    assert proc.returncode == 1
    expected = "contains the capsule's manifest directory" if what == "manifest" else "contains mur's home"
    assert "error[E-IO-002]: --workdir" in proc.stderr and expected in proc.stderr, proc.stderr
    assert "hint: " in proc.stderr and "Traceback" not in proc.stderr
    assert not (hello / "workdir").exists() and not (target / "task.md").exists()


def test_task_from_a_file_is_copied(hello, home, tmp_path):
    task = tmp_path / "t.md"
    task.write_text("Eve")
    assert run_mur("run", "--task", str(task), cwd=hello, home=home).returncode == 0
    [wd] = session_dirs(hello)
    assert (wd / "work" / "task.md").read_text() == "Eve"
    assert (wd / "out" / "result.txt").read_text().strip() == "Hello, Eve!"


def test_env_allow_reaches_the_guest_but_secrets_do_not(hello, home):
    proc = run_mur("run", "--task", "Fa", cwd=hello, home=home, env={"HELLO_GREETING": "Bonjour"})
    assert proc.returncode == 0, proc.stderr
    [wd] = session_dirs(hello)
    assert (wd / "out" / "result.txt").read_text().strip() == "Bonjour, Fa!"


def test_verbose_prints_the_session_details(hello, home):
    proc = run_mur("run", "--task", "Gu", "-v", cwd=hello, home=home)
    assert proc.returncode == 0, proc.stderr
    out = proc.stderr
    assert "workdir: " in out and "manifest: hello v0.1.0" in out and "driver: <none>" in out
    assert "skills: 0 installed" in out


def test_single_mode_serves_one_a2a_task_and_its_sender_reads_the_result(hello, home):
    """`mur run` with no task waits for one A2A task (single mode), runs it, lingers so the sender can
    read the result, then exits 0."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HOME": str(home), "MURMUR_A2A_TIMEOUT_SECS": "60",
           "MUR_CACHE_DIR": str(__import__("pathlib").Path.home() / ".murmur" / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "mur", "run", "--json"], cwd=hello, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = json.loads(proc.stdout.readline())["url"]
        sent = run_mur("send", url, "Ida", cwd=hello, home=home)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.strip() == "Hello, Ida!"
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
