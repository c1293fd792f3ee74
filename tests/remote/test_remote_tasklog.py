"""`mur deploy logs`' task lines (mur.remote.tasklog): one line per task start and end, read from the
session traces, put right after the startup line of the session that ran them; followed live."""

from __future__ import annotations

import json
from pathlib import Path

from trace_events import T0, agent_session, sid

from mur.remote.sessions import LocalSessions
from mur.remote.tasklog import Follower, LineSink, TaskReader, history, merged

SERVICE = "\n".join([
    "[mur supervise 2025-06-01T10:00:00] starting /x/mur run ...",
    json.dumps({"url": "http://127.0.0.1:1", "pid": 1, "session_id": sid(2)}),
    "[mur supervise 2025-06-01T10:05:00] service exited with status 137",
    "[mur supervise 2025-06-01T10:05:01] starting /x/mur run ...",
    json.dumps({"url": "http://127.0.0.1:1", "pid": 2, "session_id": sid(3)}),
])


def trace(root: Path, n: int, events: list[dict]) -> Path:
    d = root / "1" / "workdir" / sid(n)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "trace.jsonl"
    with open(path, "a") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in events)
    return path


def failed_task(n: int) -> list[dict]:
    events = agent_session(sid(n), T0 + n * 1000, [[("bash", "error", 10), ("read_file", "ok", 5)]], "failed")
    events[-1]["error"] = "max turns\nreached"
    return events


def test_task_lines_say_what_each_task_did():
    reader = TaskReader(sid(1))
    lines = [t for t in map(reader.feed, failed_task(1)) if t is not None]
    assert [t.text for t in lines] == [
        f"[mur task 2025-10-09T08:53:21Z] tsk_{sid(1)[-8:]} started (task_md) in {sid(1)}",
        f"[mur task 2025-10-09T08:53:21Z] tsk_{sid(1)[-8:]} failed 1.0s, 2 turns, 2 tool calls (1 failed): "
        "max turns reached",
    ]
    assert lines[1].record == {
        "session_id": sid(1), "task_id": f"tsk_{sid(1)[-8:]}", "event": "end", "time": "2025-10-09T08:53:21Z",
        "status": "failed", "duration_ms": 1001, "turns": 2, "tool_calls": 2, "failed_tool_calls": 1,
        "input_tokens": 2100, "output_tokens": 110, "error": "max turns reached"}


def test_merged_after_each_sessions_startup_line_older_ones_first(tmp_path):
    trace(tmp_path, 1, failed_task(1))  # its startup line is not in the window: an older session
    trace(tmp_path, 2, failed_task(2))
    trace(tmp_path, 3, failed_task(3))
    s = LocalSessions(str(tmp_path))
    tasks, offsets = history(s, s.list())
    out = [t.text for t in merged(SERVICE, tasks, 200)]
    kinds = [("task " + line.split("] ")[1].split()[0][-4:] if line.startswith("[mur task") else line[:25])
             for line in out]
    t1, t2, t3 = (f"task {sid(n)[-4:]}" for n in (1, 2, 3))
    assert kinds == [t1, t1, "[mur supervise 2025-06-01", '{"url": "http://127.0.0.1', t2, t2,
                     "[mur supervise 2025-06-01", "[mur supervise 2025-06-01", '{"url": "http://127.0.0.1', t3, t3]
    assert [t.text for t in merged(SERVICE, tasks, 3)] == out[-3:]
    assert offsets == {ref.session_id: s.size(ref) for ref in s.list()}


def test_history_reads_only_the_tail_and_skips_what_does_not_parse(tmp_path):
    path = trace(tmp_path, 1, failed_task(1) + failed_task(1))
    with open(path, "a") as fh:
        fh.write('{"event_type": "task_start", "task_id": "tsk_partial"')  # being written
    s = LocalSessions(str(tmp_path))
    [ref] = s.list()
    tasks, offsets = history(s, [ref], tail=len(json.dumps(failed_task(1)[-1])) + 200)
    assert [t.record["event"] for t in tasks[sid(1)]] == ["end"]  # only the last task_end fits in the tail
    assert offsets[sid(1)] == path.stat().st_size - len('{"event_type": "task_start", "task_id": "tsk_partial"')


def test_follow_reports_new_task_events_once_whole(tmp_path):
    trace(tmp_path, 1, failed_task(1))
    s = LocalSessions(str(tmp_path))
    tasks, offsets = history(s, s.list())
    written: list[tuple[str, dict | None]] = []
    sink = LineSink(lambda text, record: written.append((text, record)))
    follower = Follower(s, offsets, sink.task)
    follower.step()
    assert written == []  # nothing new
    new = failed_task(1)[:1]
    path = trace(tmp_path, 1, new)
    with open(path, "a") as fh:
        fh.write(json.dumps(failed_task(1)[-1])[:20])  # half a line
    trace(tmp_path, 2, failed_task(2)[:1])  # a session that started since
    follower.step()
    assert [r["event"] for _t, r in written] == ["start", "start"]
    assert [r["session_id"] for _t, r in written] == [sid(1), sid(2)]
    sink.data(b"log line one\nlog li")
    sink.data(b"ne two\n")
    sink.flush()
    assert [t for t, r in written[2:]] == ["log line one", "log line two"]


def test_deploy_logs_of_a_local_deployment_with_task_lines(home, cli):
    """The real command over a local deployment's supervisor log and session traces."""
    from mur.deploy.state import Deployment, DeploymentStore
    from mur.deploy.targets import TargetSpec

    dep = "dep_0196a0a0a0a07000800000000000abcd"
    root = home / ".murmur" / "deployments" / dep
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "service.log").write_text(SERVICE + "\n")
    for n in (2, 3):
        trace(root / "releases", n, failed_task(n))
    DeploymentStore().save(Deployment(dep, "local", TargetSpec("local"), home=str(home), init="supervisor",
                                      status="running"))
    code, out, err = cli("deploy", "logs", dep[:12])
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 9 and lines[2].startswith(f"[mur task ") and lines[-1].endswith("max turns reached")
    code, out, err = cli("deploy", "logs", dep, "-n", "2", "--json")
    body = json.loads(out)
    assert len(body["lines"]) == 2 and [t["event"] for t in body["tasks"]] == ["start", "end"]
    assert body["tasks"][1]["session_id"] == sid(3)
