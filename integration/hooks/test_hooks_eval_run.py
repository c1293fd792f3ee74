"""`mur eval run` end to end: a real capsule (murmur-driver-anthropic + greet + murmur-hook-eval) run
once per dataset case through the real CLI, against a loopback model server whose script makes the
cases score differently (tool called / no tool / provider error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hook_support import hook_entry

SCORERS = [{"type": "exit_ok", "name": "ok"}, {"type": "tool_sequence", "name": "seq", "expected": ["greet"]}]


def mur_eval_run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MURMUR_A2A_TIMEOUT_SECS": "2", **(env or {})}
    return subprocess.run([sys.executable, "-m", "mur", "eval", "run", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=cwd)


def eval_lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_eval_run_scores_each_case_in_its_own_session(http_capsule, model_server, make_hook, eval_wasm, tmp_path):
    server = model_server([
        # case greets: calls the tool, then answers -> pass
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 30, "output_tokens": 2}},
        {"text": "Greeted Ada.", "usage": {"input_tokens": 40, "output_tokens": 3}},
        # case chats: answers without the tool -> tool_sequence fails
        {"text": "Hi Bob.", "usage": {"input_tokens": 30, "output_tokens": 3}},
        # case broken: the provider refuses -> the session fails, exit_ok fails
        {"error": {"status": 400, "message": "bad request"}},
    ])
    hook = hook_entry("murmur-hook-eval", make_hook("murmur-hook-eval", eval_wasm), {"filesystem": {"scope": "."}})
    manifest = http_capsule(server.url, [hook], extra={"observability": {"eval": {"scorers": SCORERS}}})
    capsule = manifest.parent
    data = tmp_path / "data"
    (data / "tasks").mkdir(parents=True)
    (data / "tasks" / "greet.md").write_text("Greet Ada\n")
    (data / "tasks" / "chat.md").write_text("Say hi to Bob\n")
    dataset = data / "smoke.jsonl"
    dataset.write_text(
        '{"case_id": "greets", "task_path": "tasks/greet.md", "expected": "Hello, Ada!"}\n'
        "\n"
        '{"case_id": "chats", "task_path": "tasks/chat.md"}\n'
        '{"case_id": "broken", "task_path": "tasks/missing.md"}\n'
    )
    # the host's own labels must not leak into the cases: eval run sets both per case
    proc = mur_eval_run(str(capsule), "--dataset", str(dataset), cwd=tmp_path,
                        env={"MURMUR_CASE_ID": "host-case", "MURMUR_DATASET_ID": "host-ds"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "Running 3 case(s) …"
    assert [line for line in out if line.startswith("  case: ")] == ["  case: greets", "  case: chats",
                                                                       "  case: broken"]
    results = [line.split()[1] for line in out if line.startswith("    result: ")]
    assert results == ["pass", "fail", "fail"]
    sessions = [line.split("session: ")[1] for line in out if line.startswith("    result: ")]
    assert len(set(sessions)) == 3 and all(s.startswith("ses_") and len(s) == 36 for s in sessions)
    assert "warning: task_path 'tasks/missing.md' not found" in proc.stderr
    assert "session failed: error[" in proc.stderr

    # summary: counts and one row per case with its scores and workdir
    summary = out[out.index("── Summary " + "─" * 38):]
    assert summary[1] == "pass: 1/3"
    rows = {line.split()[0]: line for line in summary[3:]}
    assert list(rows) == ["greets", "chats", "broken"]
    roots = list((capsule / "workdir").glob("eval-*"))
    assert len(roots) == 1
    root = roots[0]
    assert rows["greets"] == f"  {'greets':<24} pass  ok=1.00 seq=1.00  ({root / 'greets'})"
    assert rows["chats"] == f"  {'chats':<24} fail  ok=1.00 seq=0.00  ({root / 'chats'})"
    assert rows["broken"] == f"  {'broken':<24} fail  ok=0.00 seq=0.00  ({root / 'broken'})"

    # each case: its own workdir, its task, and an eval.jsonl labelled with its case and the dataset
    for case_id, session, task in zip(("greets", "chats", "broken"), sessions,
                                      ("Greet Ada\n", "Say hi to Bob\n", "")):
        case_dir = root / case_id
        assert (case_dir / "task.md").read_text() == task
        assert (capsule / "workdir" / session / "trace.jsonl").is_file()  # the runtime's record: not in the case dir
        assert not (case_dir / ".murmur").exists()
        run = eval_lines(case_dir / "eval.jsonl")[-1]
        assert run["record_type"] == "dataset_run"
        assert (run["case_id"], run["dataset_id"]) == (case_id, "smoke")
    trace_file = capsule / "workdir" / sessions[2] / "trace.jsonl"
    trace = [json.loads(x) for x in trace_file.read_text().splitlines()]
    assert [e["exit_status"] for e in trace if e["event_type"] == "session_end"] == ["failed"]

    # and `mur eval show` reads a case's workdir
    show = subprocess.run([sys.executable, "-m", "mur", "eval", "show", "--json", str(root / "chats")],
                          capture_output=True, text=True, timeout=60)
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["dataset_run"]["case_id"] == "chats"


def test_eval_run_json_uses_the_manifest_dataset_id(http_capsule, model_server, make_hook, eval_wasm, tmp_path):
    server = model_server([
        {"tool_use": {"name": "greet", "input": {"name": "Ada"}}, "usage": {"input_tokens": 30, "output_tokens": 2}},
        {"text": "Greeted Ada.", "usage": {"input_tokens": 40, "output_tokens": 3}},
    ])
    hook = hook_entry("murmur-hook-eval", make_hook("murmur-hook-eval", eval_wasm), {"filesystem": {"scope": "."}})
    manifest = http_capsule(server.url, [hook],
                            extra={"observability": {"eval": {"dataset_id": "regression-7", "scorers": SCORERS}}})
    (tmp_path / "greet.md").write_text("Greet Ada\n")
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text('{"case_id": "case/001", "task_path": "greet.md"}\n')
    root = tmp_path / "runs"
    proc = mur_eval_run("--dataset", str(dataset), "--json", "--workdir-root", str(root), cwd=manifest.parent)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    doc = json.loads(lines[0])
    assert list(doc) == ["dataset", "dataset_id", "cases", "pass", "total"]
    assert (doc["dataset"], doc["dataset_id"], doc["pass"], doc["total"]) == (str(dataset), "regression-7", 1, 1)
    [case] = doc["cases"]
    assert list(case) == ["case_id", "result", "session_id", "workdir", "scores"]
    assert (case["case_id"], case["result"], case["scores"]) == ("case/001", "pass", {"ok": 1.0, "seq": 1.0})
    assert case["workdir"] == str(root / "case_001")
    assert case["session_id"].startswith("ses_")
    assert "  case: case/001" in proc.stderr  # progress goes to stderr with --json
    run = eval_lines(root / "case_001" / "eval.jsonl")[-1]
    assert (run["case_id"], run["dataset_id"], run["overall"]) == ("case/001", "regression-7", "pass")

    # a reused workdir root is refused before anything runs (cases never share state)
    again = mur_eval_run("--dataset", str(dataset), "--workdir-root", str(root), cwd=manifest.parent)
    assert again.returncode == 1
    assert again.stderr.startswith(f"error[E-IO-003]: case workdir {root / 'case_001'} already exists and is not empty")
    assert len(server.requests) == 2


def test_eval_run_refuses_a_capsule_without_the_eval_hook(hello_capsule, tmp_path):
    manifest = hello_capsule([], {"observability": {"eval": {"scorers": SCORERS}}})
    (tmp_path / "t.md").write_text("Ada")
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"case_id": "a", "task_path": "t.md"}\n')
    proc = mur_eval_run(str(manifest.parent), "--dataset", str(dataset), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error[E-MAN-001]: murmur.yaml: mur eval run needs a 'murmur-hook-eval' artifact")
    assert proc.stdout == ""
    assert not (manifest.parent / "workdir").exists()


def test_eval_run_reports_a_case_that_could_not_start_as_stage_failed(hello_capsule, make_hook, eval_wasm, tmp_path):
    import socket

    hook = hook_entry("murmur-hook-eval", make_hook("murmur-hook-eval", eval_wasm), {"filesystem": {"scope": "."}})
    with socket.socket() as held:  # the capsule's internal_port is taken: `mur run` stops before a session
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        manifest = hello_capsule([hook], {"observability": {"eval": {"scorers": SCORERS}},
                                          "network": {"internal_port": port}})
        dataset = tmp_path / "d.jsonl"
        dataset.write_text('{"case_id": "a", "task_path": ""}\n')
        proc = mur_eval_run(str(manifest.parent), "--dataset", str(dataset), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "    stage failed: error[E-RUN-010]" in proc.stderr
    assert "    result: stage_failed\n" in proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["pass"], doc["total"], doc["dataset_id"]) == (0, 1, "d")
    [case] = doc["cases"]
    assert (case["result"], case["session_id"], case["scores"]) == ("stage_failed", None, {})
    assert not list(Path(case["workdir"]).glob(".murmur/ses_*"))
    assert not list((manifest.parent / "workdir").glob("ses_*"))
