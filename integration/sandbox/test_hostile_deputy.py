"""Class 1 of the escape suite through a real `mur run`: the runtime as a confused deputy.

A scripted hostile model (integration/sandbox/hostile.py) makes tool calls that swap the files and
directories the runtime reads and writes (out/result.txt, logs/, task.md / input.txt, tools/,
MURMUR.md, .capsule-home, a guest's scope, the session directory) for symlinks and hard links,
races the runtime with a background swapper, and tries to alter the audit record (trace.jsonl,
logs, staged payloads), as root and as a non-root user. Every attack asserts the host files
outside are untouched and nothing is disclosed, next to a control doing the same thing where it
is allowed.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from hostile import DEFAULT_SHELL, FINAL_TEXT, HostileRun, cgroup_v1_roots, remove_cgroup, seed_cache, tool_artifact
from mur.sandbox import access

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

SECRET = "root-only-secret-7f3a"


@dataclass
class Host:
    """Files outside every workdir that the runtime must never write, read for the model, or alter."""

    dir: Path
    victim: Path  # a file the runtime would overwrite if it followed a link
    secret: Path  # a file only its owner may read (0600)
    dropzone: Path  # a directory the runtime would write into if it followed a link

    def snapshot(self) -> dict[str, tuple]:
        out = {}
        for path in (self.victim, self.secret, self.dropzone):
            st = os.lstat(path)
            xattrs = tuple(sorted((n, os.getxattr(path, n, follow_symlinks=False))
                                  for n in os.listxattr(path, follow_symlinks=False)))
            body = path.read_bytes() if path.is_file() else tuple(sorted(os.listdir(path)))
            out[str(path)] = (st.st_mode, st.st_uid, st.st_nlink if path.is_dir() else 0, body, xattrs)
        return out


def make_host(base: Path, owner: tuple[int, int] = (0, 0)) -> Host:
    d = base / "host"
    d.mkdir(mode=0o755)
    host = Host(d, d / "victim.txt", d / "secret.txt", d / "dropzone")
    host.victim.write_text("host-victim\n")
    host.secret.write_text(f"{SECRET}\n")
    os.chmod(host.secret, 0o600)
    host.dropzone.mkdir()
    for path in (d, host.victim, host.secret, host.dropzone):
        os.chown(path, *owner)
    return host


@pytest.fixture
def host(tmp_path):
    return make_host(tmp_path)


def rc_lines(result) -> list[str]:
    return [line for line in result.data.splitlines() if line.startswith("rc=")]


def assert_refused(result, what: str) -> None:
    codes = rc_lines(result)
    assert codes and all(c != "rc=0" for c in codes), f"{what} was allowed: {result.content}"


def assert_ok(run: HostileRun) -> None:
    assert run.returncode == 0, run.describe()
    assert run.result_text == FINAL_TEXT, run.describe()


def disk_in_force(run: HostileRun) -> bool:
    """Did the session's tools write a session disk (copied back at the end), per its trace?"""
    start = run.events("session_start")
    return bool(start) and start[0]["effective_grants"]["disk_ceiling"] in ("ext4-loop", "tmpfs")


def assert_regular(path: Path) -> None:
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1, f"{path} is not a plain file"


# --- what the runtime writes: out/result.txt, logs, the session directory ----------------------


def run_result_and_logs_attacks(capsule, host: Host) -> HostileRun:
    v, dz = host.victim, host.dropzone
    return capsule.run([
        f"mkdir -p out && ln -sf {v} out/result.txt; rm -rf logs; ln -s {dz} logs; ls -l out logs",  # 0
        f"ln -sf {v} ../out/result.txt; echo rc=$?; echo forged > ../out/result.txt; echo rc=$?; "  # 1
        f"rm -r ../out; echo rc=$?; mv ../out ../out2; echo rc=$?; ln -s {dz} ../out/sub; echo rc=$?",
        "python3 -c \"print('y' * 40000)\"",  # 2: a full shell log
        "cat ../logs/shell-*.log | head -c 20; echo; echo rc=$?",  # 3: control: logs are readable
        f"echo tamper >> ../logs/bootstrap.log; echo rc=$?; rm -f ../logs/bootstrap.log; echo rc=$?; "  # 4
        f"for f in ../logs/shell-*.log; do echo tamper >> $f; echo rc=$?; : > $f; echo rc=$?; done; "
        f"ln -s {v} ../logs/shell-forged.log; echo rc=$?; mv ../logs ../logs2; echo rc=$?",
        f"echo '{{\"event_type\":\"forged\"}}' >> ../trace.jsonl; echo rc=$?; : > ../trace.jsonl; echo rc=$?; "  # 5
        "rm ../trace.jsonl; echo rc=$?; mv ../trace.jsonl ../t2; echo rc=$?; ln ../trace.jsonl t3; echo rc=$?; "
        "python3 -c \"import os; os.write(os.open('../trace.jsonl', os.O_WRONLY | os.O_APPEND), b'x')\"; echo rc=$?",
        "mkdir -p mine && echo produced > mine/file.txt && cat mine/file.txt && echo more >> notes.jsonl",  # 6: control
    ])


def check_result_and_logs_attacks(run: HostileRun, host: Host, before: dict, record_escape, who: str) -> None:
    assert_ok(run)
    assert host.snapshot() == before, "a host file outside the workdir changed"
    assert run.accessible == run.session / "work"
    assert_refused(run.results[1], "writing the session's out/ from a tool")
    assert_regular(run.session / "out" / "result.txt")
    big = run.results[2]
    assert big.body["truncated"] and big.body["log_path"].startswith(str(run.session / "logs") + "/")
    log = Path(big.body["log_path"])
    assert_regular(log)
    text = log.read_text()
    assert text.startswith("$ python3 -c") and "y" * 40000 in text and "tamper" not in text
    assert run.results[3].data.startswith("$ python3 -c") and rc_lines(run.results[3]) == ["rc=0"]  # read: allowed
    assert_refused(run.results[4], "altering the session's logs")
    assert "tamper" not in (run.session / "logs" / "bootstrap.log").read_text()
    assert sorted(p.name for p in (run.session / "logs").iterdir() if not p.name.startswith("tool-")) == [
        "bootstrap.log", log.name]  # nothing planted
    assert_refused(run.results[5], "altering trace.jsonl")
    lines = (run.session / "trace.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]  # every line still one whole event
    assert "forged" not in {e["event_type"] for e in events} and events[-1]["event_type"] == "task_end"
    assert [e["session_id"] for e in events] == [run.info["session_id"]] * len(events)
    assert run.results[6].ok and run.results[6].data == "produced\n"  # the control: its own files
    assert (run.accessible / "mine" / "file.txt").read_text() == "produced\n"
    record_escape(f"swap out/, logs/; alter trace, logs ({who})", "all refused, host untouched",
                  "the tool writes its own files, reads the logs")


def test_results_logs_and_trace_as_root(hostile, host, record_escape):
    before = host.snapshot()
    run = run_result_and_logs_attacks(hostile(), host)
    check_result_and_logs_attacks(run, host, before, record_escape, "root")


def test_results_logs_and_trace_as_a_non_root_user(hostile, unprivileged_user, record_escape):
    user = unprivileged_user
    host = make_host(user.home, (user.uid, user.gid))  # the user's own files: the runtime could reach them
    before = host.snapshot()
    run = run_result_and_logs_attacks(hostile(user=user), host)
    check_result_and_logs_attacks(run, host, before, record_escape, "non-root")
    assert os.stat(run.session / "trace.jsonl").st_uid == user.uid  # same uid: only Landlock stands between


def test_what_the_engine_compiles_is_out_of_reach(hostile, unprivileged_user, tmp_path, record_escape):
    """What ran is what the engine compiled, from bytes it hashed: tools can neither reach nor replace
    its cache (compiled entries, kept sources), and no session copies a payload anywhere."""
    user = unprivileged_user
    cache = user.home / ".murmur" / "cache"
    run = hostile(user=user).run([
        f"ls {cache}/wasm/; echo rc=$?; for f in {cache}/wasm/*; do cp /dev/null $f; echo rc=$?; "
        f"rm $f; echo rc=$?; done; echo x > {cache}/wasm/planted; echo rc=$?",
        "echo mine > mine.wasm && cat mine.wasm",
    ])
    assert_ok(run)
    assert_refused(run.results[0], "touching the compile cache")
    assert run.results[1].data == "mine\n"
    assert not (cache / "wasm" / "planted").exists() and not (cache / "payloads").exists()
    assert [p.name for p in run.accessible.rglob("*.wasm")] == ["mine.wasm"]  # no payload staged in the workdir
    root_run = hostile().run([f"ls {Path.home()}/.murmur; echo rc=$?"])
    assert_ok(root_run)
    assert_refused(root_run.results[0], "reaching root's cache")  # /root is not even searchable by the tool
    record_escape("replace what the engine compiles", "refused (Landlock / DAC); nothing staged to replace",
                  "the tool writes its own .wasm")


# --- what the runtime reads: task.md / input.txt on a rerun ------------------------------------


def test_a_rerun_never_reads_a_linked_task_file(hostile, host, tmp_path, record_escape):
    capsule, work = hostile(), tmp_path / "work"
    second = tmp_path / "other-secret.txt"  # root-only, same filesystem: can be hard linked
    second.write_text(f"{SECRET}-hardlinked\n")
    os.chmod(second, 0o600)
    plant = capsule.run([f"ln -sf {host.secret} task.md && ln -sf {host.secret} input.txt && ls -l"], workdir=work)
    assert_ok(plant)
    assert os.path.islink(work / "task.md")

    rerun = capsule.run([], task=None, workdir=work)
    assert rerun.returncode == 1 and "error[E-IO-002]" in rerun.stderr and "task.md" in rerun.stderr, rerun.describe()
    assert rerun.requests == [] and SECRET not in rerun.stdout + rerun.stderr
    via_flag = capsule.run([], task=str(work / "task.md"), workdir=work)  # --task naming the planted link
    assert via_flag.returncode == 1 and "error[E-IO-002]" in via_flag.stderr and via_flag.requests == []

    (work / "task.md").unlink()
    (work / "input.txt").unlink()
    os.link(second, work / "input.txt")  # a hard link to a root-only file (e.g. left by a weaker tier)
    hard = capsule.run([], task=None, workdir=work)
    assert hard.returncode == 1 and "hard link" in hard.stderr and hard.requests == [], hard.describe()
    assert SECRET not in hard.stdout + hard.stderr
    (work / "input.txt").unlink()

    # the control: a task the model itself left in task.md is what the next run starts from
    leave = capsule.run(["echo 'the task the agent left' > task.md"], workdir=work)
    assert_ok(leave)
    control = capsule.run([], task=None, workdir=work)
    assert_ok(control)
    assert control.first_prompt.startswith("the task the agent left")
    record_escape("rerun: task.md/input.txt -> root-only file", "E-IO-002, no request sent",
                  "a task.md the agent wrote is read")


# --- what the runtime stages into the workdir, and cleans up -----------------------------------


def test_staging_on_a_rerun_replaces_links_instead_of_writing_through_them(hostile, host, tmp_path, record_escape):
    capsule, work = hostile(), tmp_path / "work"
    before = host.snapshot()
    dz, v = host.dropzone, host.victim
    first = capsule.run([
        f"rm -rf tools && ln -s {dz} tools; rm -f MURMUR.md && ln -s {v} MURMUR.md; "
        f"rm -rf .capsule-home && ln -s {dz} .capsule-home; mkdir -p .murmur && ln -s {dz} .murmur/ses_x; ls -la",
    ], workdir=work)
    assert_ok(first)
    second = capsule.run([
        "head -n 1 tools/bash/murmur.yaml && head -n 1 MURMUR.md && echo home=$HOME && touch $HOME/ok",
        f"rm -rf tools/bash && ln -s {dz} tools/bash && ls -l tools",
    ], task="second run", workdir=work)
    assert_ok(second)
    assert second.results[0].data.startswith("name: bash\n# MURMUR.md")  # the control: staged afresh
    third = capsule.run(["head -n 1 tools/bash/murmur.yaml"], task="third run", workdir=work)
    assert_ok(third)
    assert third.results[0].data == "name: bash\n"
    assert host.snapshot() == before
    assert (work / "tools").is_dir() and not (work / "tools").is_symlink()
    assert (work / "tools" / "bash").is_dir() and not (work / "tools" / "bash").is_symlink()
    assert_regular(work / "MURMUR.md")
    assert (work / ".capsule-home" / "ok").is_file(), second.describe()
    assert not list(work.glob(".murmur/ses_*/trace.jsonl"))  # the session record is never under the workdir
    record_escape("rerun: tools/, tools/bash, MURMUR.md, .capsule-home -> host", "links replaced, host untouched",
                  "fresh staging works")


def test_a_guest_scope_swapped_for_a_link_is_not_followed(hostile, host, probe_tool, record_escape):
    """A WASM guest's preopen is created once and handed over by fd: swapping the directory for a
    link does not move the next guest onto the host."""
    before = host.snapshot()
    capsule = hostile(artifacts=[("probe", probe_tool)], capabilities="filesystem:\n  scope: data")
    run = capsule.run([
        {"name": "probe", "input": {"op": "write", "path": "first.txt", "text": "one"}},  # control
        f"mv data data.moved && ln -s {host.dropzone} data && ls -l",
        {"name": "probe", "input": {"op": "write", "path": "second.txt", "text": "two"}},
        {"name": "probe", "input": {"op": "listdir", "path": "."}},
    ])
    assert_ok(run)
    assert json.loads(run.results[0].data)["ok"]
    assert host.snapshot() == before, "the guest wrote through the swapped scope"
    assert (run.accessible / "data.moved" / "first.txt").read_text() == "one"
    assert (run.accessible / "data.moved" / "second.txt").read_text() == "two"
    assert "second.txt" in json.loads(run.results[3].data)["entries"]
    record_escape("swap a guest's scope dir for a link", "guest stays in the original directory",
                  "the guest writes its scope")


# --- ACLs (root): grant and undo never reach a file outside the workdir -----------------------


def test_acl_grant_and_undo_never_reach_a_hard_linked_host_file(hostile, host, tmp_path, record_escape):
    work = tmp_path / "work"
    work.mkdir()
    shared = tmp_path / "shared.txt"  # a host file an admin let uid 65534 read
    shared.write_text("shared\n")
    os.chmod(shared, 0o640)
    os.setxattr(shared, access.ACCESS, access.encode(access.with_user(access.from_mode(0o640), 65534, 4)))
    os.link(host.secret, work / "linked.txt")
    os.link(shared, work / "shared-link.txt")
    (work / "own.txt").write_text("own\n")
    before = host.snapshot()
    shared_acl = os.getxattr(shared, access.ACCESS)
    run = hostile().run([
        "echo pwned > linked.txt; echo rc=$?; cat linked.txt; echo rc=$?",
        "echo pwned >> shared-link.txt; echo rc=$?",
        "echo mine >> own.txt && cat own.txt",  # the control: a file of the workdir is writable
    ], workdir=work)
    assert_ok(run)
    assert SECRET not in run.results[0].data
    if not disk_in_force(run):
        assert_refused(run.results[0], "writing a hard-linked root-only file")
        assert_refused(run.results[1], "writing a hard-linked shared file")
    else:  # a file with two names never enters the session disk: the tool writes a file of its own
        assert run.results[0].data == "rc=0\npwned\nrc=0\n"
        assert os.stat(work / "linked.txt").st_ino == os.stat(host.secret).st_ino  # still the link, left alone
    assert run.results[2].data == "own\nmine\n"
    assert host.snapshot() == before
    assert os.getxattr(shared, access.ACCESS) == shared_acl and stat.S_IMODE(os.stat(shared).st_mode) == 0o640
    assert shared.read_text() == "shared\n"
    record_escape("ACL grant/undo via hard links to host files", "skipped: host ACLs and modes unchanged",
                  "workdir files get the grant")


# --- racing the runtime ------------------------------------------------------------------------


SWAPPER = """setsid bash -c '
while :; do
  for n in out logs tools MURMUR.md task.md .capsule-home data d; do
    rm -rf "$n"; ln -s {dz} "$n" 2>/dev/null; rm -f "$n"; mkdir -p "$n/e" 2>/dev/null; echo x > "$n/e/f" 2>/dev/null
  done
done' >/dev/null 2>&1 < /dev/null & echo started"""


def run_race(capsule, host: Host) -> HostileRun:
    dz = host.dropzone
    return capsule.run([
        SWAPPER.format(dz=dz),
        "python3 -c \"print('z' * 40000)\"",
        {"name": "probe", "input": {"op": "write", "path": "f.txt", "text": "x"}},
        "python3 -c \"print('w' * 40000)\"",
        "sleep 1; echo still-here",
    ], task="race")


@pytest.mark.parametrize("who", ["root", "non-root"])
def test_a_background_swapper_racing_the_runtime_changes_nothing_outside(hostile, tmp_path, probe_tool, request,
                                                                          who, record_escape):
    user = request.getfixturevalue("unprivileged_user") if who == "non-root" else None
    if user is not None:  # the probe's compiled component in the user's own cache (no compile in the run)
        seed_cache(user.home / ".murmur" / "cache", [probe_tool / "probe.wasm"])
        user.chown(user.home / ".murmur")
    host = make_host(user.home if user else tmp_path, (user.uid, user.gid) if user else (0, 0))
    before = host.snapshot()
    capsule = hostile(user=user, shell_allow=(*DEFAULT_SHELL, "setsid"), artifacts=[("probe", probe_tool)],
                      capabilities="filesystem:\n  scope: data")
    run = run_race(capsule, host)
    assert run.returncode in (0, 1), run.describe()  # a call may fail on a link; the session must not escape
    assert run.results[0].data == "started\n", run.describe()
    assert host.snapshot() == before, "the runtime wrote, chmodded or ACLed a host file while racing"
    assert_regular(run.session / "trace.jsonl")
    logs = [p for p in (run.session / "logs").iterdir() if p.name.startswith("shell-")]
    assert logs and all(not p.is_symlink() for p in logs)
    record_escape(f"background swapper racing the runtime ({who})", "host untouched", "the calls still run")


# --- killed runs leave nothing runnable behind --------------------------------------------------


def test_a_killed_run_leaves_no_payload_and_the_next_runs(hostile, tmp_path, record_escape):
    """kill -9 mid-session: nothing could clean up, and nothing needed to (no payload is copied per
    session: the engine's cache holds one copy per content). The sweep of the private payload
    directories made where the cache is not private is tests/session/test_session_staging.py's."""
    cache = seed_cache(tmp_path / "cache")
    env = {"MUR_CACHE_DIR": str(cache)}
    capsule = hostile()
    running = capsule.start(["sleep 60"], env=env)
    info = running.startup()
    assert info.get("session_id"), running.finish().describe()
    before = sorted(p.name for p in (cache / "wasm").iterdir())
    os.kill(running.proc.pid, signal.SIGKILL)
    running.finish()
    _reap_session_cgroups(info["session_id"])
    assert not (cache / "payloads").exists()
    assert not any(info["session_id"] in p.name for p in cache.rglob("*"))  # nothing of that session in the cache
    run = capsule.run(["echo next"], env=env)
    assert_ok(run)
    assert sorted(p.name for p in (cache / "wasm").iterdir()) == before  # the same entries served both
    record_escape("kill -9 mid-session", "no payload left behind (none staged)", "the next run loads the cache")


def _reap_session_cgroups(session_id: str) -> None:
    """A killed mur leaves its session cgroups and their processes: kill and remove them."""
    for root in {*cgroup_v1_roots().values(), "/sys/fs/cgroup/unified", "/sys/fs/cgroup"}:
        remove_cgroup(os.path.join(root, "mur", session_id))


@pytest.fixture(scope="session")
def probe_tool():
    """The tests' `probe` tool component (tests/wasm/guests/probe) as a local-source artifact, in a
    directory every uid can read (the non-root runs stage it too)."""
    import shutil
    import tempfile

    from mur.wasm.build import build_component

    wasm = build_component(Path(__file__).resolve().parents[2] / "tests" / "wasm" / "guests" / "probe", "tool")
    base = Path(tempfile.mkdtemp(prefix="mur-hostile-probe-", dir="/tmp"))
    os.chmod(base, 0o755)
    dest = tool_artifact(base / "probe", "probe", wasm, 'file ops: {"op": "write", "path": ...}')
    yield dest
    shutil.rmtree(base, ignore_errors=True)
