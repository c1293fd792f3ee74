"""The disk ceiling the kernel counts (issue 27), at the ShellSandbox level, as root (a loop-mounted
ext4 image) and as a non-root user (a tmpfs in the session's user namespace): each way past the old
watcher -- a fast writer, fallocate(KEEP_SIZE), O_TMPFILE, directories / long symlinks / xattrs, a
chain 5,000+ levels deep, many empty inodes -- next to its control (the same script, bare, gets the
whole way), then a rerun on the same workdir. Where no mechanism is available the watcher is the
ceiling: it survives the deep tree and counts what st_size hid.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from asuser import run_sessions  # type: ignore[import-not-found]
from disk_attacks import ATTACKS, DEEP, INODES  # type: ignore[import-not-found]
from mur import fsafe, fswalk
from mur.sandbox.diskplan import RUNTIME_HEADROOM as HEADROOM
from mur.sandbox.probe import probe_host
from sbx_support import SYSTEM_PYTHON, capabilities, python_stdlib  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

CEILING = 8 << 20
# The kernel-matrix VMs (emulated CPUs) run the kernel-counting proofs only (vm_suite sets this).
QUICK = os.environ.get("MUR_ESCAPE_QUICK") == "1"
NAMES = ("fill", "tmpfile") if QUICK else tuple(ATTACKS)
slow = pytest.mark.skipif(QUICK, reason="MUR_ESCAPE_QUICK: the kernel matrix runs the quick subset")
TRY = 3 * CEILING
REFUSED = ("ENOSPC", "EDQUOT")
ALLOW = ("bash", "python3", "cat")


def caps(limit: int = CEILING):
    return capabilities(allow=ALLOW, resources={"workdir_max_bytes": limit})


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def host_usage(path: Path) -> fswalk.Usage:
    with fsafe.Tree(path) as tree:
        return fswalk.usage(tree.fd)


def bare(script: str, *args: str, user=None) -> dict:
    """The control: the same script as a plain process in a plain directory."""
    base = Path(tempfile.mkdtemp(prefix="mur-disk-control-"))
    try:
        prefix = []
        if user is not None:
            os.chown(base, user.uid, user.gid)
            prefix = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
        done = subprocess.run([*prefix, SYSTEM_PYTHON, "-c", script, *args], cwd=base, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return last_json(done.stdout)
    finally:
        with fsafe.Tree(base.parent) as parent:
            parent.remove_tree(base.name)


@pytest.fixture(scope="module")
def kernel_disk():
    probe = probe_host()
    if not (probe.sealed and (probe.disk_loop or probe.disk_tmpfs)):
        pytest.skip(f"no kernel-counted disk on this host: {probe.disk_reason or probe.sealed_reason}")
    return probe


def test_every_way_past_the_ceiling_is_refused_by_the_kernel_as_root(sandbox, kernel_disk, record_escape):
    for name in NAMES:
        script = ATTACKS[name]
        control = bare(script, str(TRY))
        assert control["got"] >= TRY and control["error"] is None, (name, control)
        sb = sandbox(caps(), own_workdir=True)
        assert sb.policy.disk.mechanism == ("ext4-loop" if kernel_disk.disk_loop else "tmpfs")
        assert sb.policy.host_view == "composed-root"
        r = sb.run("python3", args=["-c", script, str(TRY), "1"])
        got = last_json(r.stdout) if r.stdout.strip() else {"got": 0, "error": "killed"}
        assert got["got"] < TRY, (name, got)
        assert got["error"] in REFUSED + ("killed",), (name, got, r.stderr)
        assert sb.disk.usage().used <= CEILING + HEADROOM, name
        exceeded = sb.workdir_exceeded()
        assert exceeded is not None and exceeded.code == "E-RUN-013" and "bytes in use" in exceeded.message, name
        workdir = sb.workdir
        sb.close()
        back = host_usage(workdir)  # what came back: the ceiling's bytes, a directory's block on the host for each inode
        assert back.inodes <= sb.policy.disk.inodes and back.bytes <= CEILING + HEADROOM + back.inodes * 4096, (name, back)
        record_escape(f"disk: {name} past an 8 MiB ceiling (root)", f"{got['error']} at {got['got'] >> 20} MiB, "
                      "E-RUN-013", f"bare: {control['got'] >> 20} MiB")


def test_every_way_past_the_ceiling_is_refused_by_the_kernel_as_a_user(unprivileged_user, kernel_disk,
                                                                     record_escape):
    user = unprivileged_user
    names = list(NAMES)
    shell = {"allow": list(ALLOW), "interpreter_runtime": [
        {"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]}
    spec = {"sessions": [{"caps": {"shell": shell, "resources": {"workdir_max_bytes": CEILING}}} for _ in names],
            "calls": [[i, {"binary": "python3", "args": ["-c", ATTACKS[n], str(TRY), "1"]}] for i, n in enumerate(names)]}
    out = run_sessions(user, spec, timeout=400)
    for name, session in zip(names, out["sessions"]):
        assert session["disk"] == "tmpfs" and session["view"] == "composed-root", session
        result = session["results"][0]
        got = last_json(result["stdout"]) if result["stdout"].strip() else {"got": 0, "error": "killed"}
        assert got["got"] < TRY and got["error"] in REFUSED + ("killed",), (name, got, result["stderr"])
        assert session["disk_used"] <= CEILING + HEADROOM and "E-RUN-013" in (session["exceeded"] or ""), (name, session)
        back = host_usage(Path(session["workdir"]))
        assert back.bytes <= CEILING + HEADROOM + back.inodes * 4096, (name, back)
        control = bare(ATTACKS[name], str(TRY), user=user)
        assert control["got"] >= TRY, (name, control)
        record_escape(f"disk: {name} past an 8 MiB ceiling (non-root)", f"{got['error']}, E-RUN-013",
                      f"bare: {control['got'] >> 20} MiB")


@slow
def test_a_tree_5000_levels_deep_and_many_inodes_then_a_rerun(sandbox, kernel_disk, record_escape):
    """The deep chain the recursive watcher died on, and the inode limit, on the session disk; copy-out
    and the next session's copy-in walk them iteratively: the rerun on the same workdir just works."""
    big = caps(64 << 20)  # room for 8192 inodes
    sb = sandbox(big)
    deep = sb.run("python3", args=["-c", DEEP, "5000"])
    assert last_json(deep.stdout) == {"want": 5000, "got": 5000, "error": None}, deep.stderr
    many = sb.run("python3", args=["-c", INODES, "20000"])
    got = last_json(many.stdout)
    assert got["error"] == "ENOSPC" and got["got"] < sb.policy.disk.inodes, got  # the inode ceiling
    workdir = sb.workdir
    sb.close()
    assert host_usage(workdir).inodes > 5000 + got["got"]  # all of it came back, at any depth
    again = sandbox(big)  # the next run on the same --workdir: copy-in at any depth, then work as usual
    r = again.run("bash", command="cd d/d/d && ls | head -2; cat ../../../many/0 && echo ok")
    assert r.exit_code == 0 and r.stdout.endswith("ok\n"), r.stderr
    assert bare(INODES, "10000")["got"] == 10000
    record_escape("disk: 5000-level tree + 20k empty files, then a rerun", "ENOSPC at the inode ceiling; rerun ok",
                  "bare: 10000 files")


@slow
def test_without_a_kernel_mechanism_the_watcher_is_the_ceiling_and_survives_the_tree(sandbox, record_escape):
    """A host that mounts no disk (no loop device, RAM too small): the watcher counts st_blocks of
    every inode, files open with no name, at a fixed interval; a deep tree does not kill it."""
    probe = replace(probe_host(), disk_loop=False, disk_tmpfs=False, disk_reason="simulated: no disk here")
    notes: list[str] = []
    sb = sandbox(caps(48 << 20), probe=probe, log=notes.append)
    assert sb.policy.disk.mechanism == "watcher" and "simulated" in sb.policy.disk.reason
    assert any("not kernel-counted" in n for n in notes)
    deep = sb.run("python3", args=["-c", DEEP, "5000"])  # ~20 MiB of directory blocks
    assert last_json(deep.stdout)["got"] == 5000, deep.stderr
    time.sleep(3 * sb.policy.disk.interval)
    assert sb.workdir_exceeded() is None  # the watcher walked it, and is still there
    r = sb.run("python3", args=["-c", ATTACKS["fallocate"], str(64 << 20)])  # blocks with st_size 0
    # the watcher ends it within an interval: a write is not refused as it happens, but caught
    deadline = time.monotonic() + 10
    while sb.workdir_exceeded() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    exceeded = sb.workdir_exceeded()
    assert exceeded is not None and exceeded.code == "E-RUN-013" and "st_blocks" in exceeded.message, r.stdout
    record_escape("disk: deep tree + fallocate(KEEP_SIZE), watcher fallback", "watcher alive, E-RUN-013",
                  "the old watcher died at ~1,000 levels and counted st_size")


@slow
def test_files_held_open_with_no_name_count_for_the_watcher(sandbox):
    probe = replace(probe_host(), disk_loop=False, disk_tmpfs=False, disk_reason="simulated")
    sb = sandbox(caps(), probe=probe)
    holder = threading.Thread(target=sb.run, args=("python3",),
                              kwargs={"args": ["-c", ATTACKS["tmpfile"], str(CEILING + (4 << 20)), "20"], "timeout": 60},
                              daemon=True)
    holder.start()
    deadline = time.monotonic() + 20
    while sb.workdir_exceeded() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    exceeded = sb.workdir_exceeded()
    assert exceeded is not None and "open file(s) with no name" in exceeded.message, exceeded
