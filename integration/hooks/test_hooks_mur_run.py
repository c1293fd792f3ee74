"""Hooks through the real `mur run` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hook_support import hook_entry




def mur_run(manifest: Path, task: str) -> tuple[subprocess.CompletedProcess, Path]:
    env = {**os.environ, "MURMUR_A2A_TIMEOUT_SECS": "2"}
    proc = subprocess.run([sys.executable, "-m", "mur", "run", "--json", "--no-env-file", "-m", str(manifest),
                           "-t", task], capture_output=True, text=True, env=env, timeout=180, cwd=manifest.parent)
    info = json.loads(proc.stdout.splitlines()[0]) if proc.stdout.strip() else {}
    return proc, Path(info.get("workdir", manifest.parent))


def test_mur_run_dispatches_to_the_debug_hook(hello_capsule, make_hook, debug_wasm):
    path = make_hook("murmur-hook-debug", debug_wasm, execution_mode="async")
    manifest = hello_capsule([hook_entry("murmur-hook-debug", path, {"filesystem": {"scope": "."}})])
    proc, session = mur_run(manifest, "Ada")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in (session / "work" / "hook-debug.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines] == ["on-task-start", "on-session-start", "on-tool-call", "on-session-end",
                                           "on-task-end"]


def test_mur_run_eval_hook_then_mur_eval_show(http_capsule, model_server, make_hook, eval_wasm):
    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 30, "output_tokens": 2}},
        {"text": "done", "usage": {"input_tokens": 40, "output_tokens": 1}},
    ])
    hook = hook_entry("murmur-hook-eval", make_hook("murmur-hook-eval", eval_wasm), {"filesystem": {"scope": "."}})
    scorers = [{"type": "exit_ok", "name": "ok"}, {"type": "tool_sequence", "name": "seq", "expected": ["greet"]}]
    manifest = http_capsule(server.url, [hook], extra={"observability": {"eval": {"scorers": scorers}}})
    proc, session = mur_run(manifest, "Greet Ada")
    assert proc.returncode == 0, proc.stderr
    show = subprocess.run([sys.executable, "-m", "mur", "eval", "show", "--json", "--workdir", str(session.parent)],
                          capture_output=True, text=True, timeout=60)
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["overall"] == "pass"


def test_ctrl_c_while_a_hook_computes_ends_the_run_interrupted(hello_capsule, make_hook, probe_wasm):
    """A sync hook busy in compiled code when Ctrl-C comes: stopped through its epoch (not run into
    its 300 s deadline), one "interrupted", exit 130, the trace closed."""
    from mur.testing.terminal import MurProcess

    manifest = hello_capsule([hook_entry("probe-spin", make_hook("probe-spin", probe_wasm))])
    text = manifest.read_text().replace("deadline_seconds: 30\n", "deadline_seconds: 300\n")  # hooks' too
    assert "deadline_seconds: 300" in text
    manifest.write_text(text)
    env = {**os.environ, "MURMUR_A2A_TIMEOUT_SECS": "2"}
    with MurProcess("run", "--json", "--no-env-file", "-t", "Ada", cwd=manifest.parent, env=env) as mur:
        mur.wait_for(lambda: mur.stdout.count("\n") >= 1, what="the startup line")
        log = Path(json.loads(mur.stdout.splitlines()[0])["workdir"]) / "logs" / "hook-probe-spin.log"
        mur.wait_for(lambda: log.is_file() and "on-session-start" in log.read_text(), what="the hook's report")
        mur.ctrl_c()
        assert mur.finish(60) == 130  # the hook never returns on its own
    assert mur.stderr == "interrupted\n"
    assert json.loads(mur.stdout.splitlines()[-1])["status"] == "interrupted"
