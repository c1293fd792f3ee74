"""No cgroup of the session's own, as in a hardened container or pod: a non-root mur whose cgroup
filesystem is read-only takes the cgroup it runs in (root-owned, with limits at or below the
manifest's) as the aggregate bound. The kernel enforces it on the tool tree exactly as a session
cgroup would: a fork bomb and a memory bomb are stopped and attributed from the enclosing cgroup's
own counters, the runtime (in the same cgroup) survives the OOM kill, and a daemon a tool left
behind is found and killed at close. Each next to its bounded control.

The read-only cgroupfs is a private mount namespace in which every cgroup mount is re-mounted
read-only, entered as root before dropping to the unprivileged uid (integration/export runs the
same code in a real hardened container).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import replace

import pytest

from asuser import run_sessions  # type: ignore[import-not-found]
from hostile import remove_cgroup  # type: ignore[import-not-found]
from sbx_support import SYSTEM_PYTHON, python_stdlib  # type: ignore[import-not-found]
from mur.sandbox.cgroups import detect_mode, v1_controller_roots

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

READ_ONLY_CGROUPS = ("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                     "for m in $(awk '$3 ~ /^cgroup/ {print $2}' /proc/self/mounts); do "
                     "mount -o remount,bind,ro \"$m\" || exit 97; done; exec \"$@\"", "sh")
MEMORY = 256 << 20
BOMB = "b = bytearray(512 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('allocated')"
FORKS = "bomb() { bomb | bomb & }; bomb; SECONDS=0; while (( SECONDS < 2 )); do :; done"


def limit_cgroups(memory: int, pids: int | None) -> list[str]:
    """Root-owned cgroups with these limits (memory, and pids unless None): nothing delegated."""
    with open("/proc/self/mounts") as fh:
        mounts = fh.read()
    name = f"mur-enclosing-{uuid.uuid4().hex[:8]}"
    made = []
    if detect_mode(mounts) == "unified":
        path = os.path.join("/sys/fs/cgroup", name)
        os.mkdir(path)
        made.append(path)
        with open(os.path.join(path, "memory.max"), "w") as fh:
            fh.write(str(memory))
        if pids is not None:
            with open(os.path.join(path, "pids.max"), "w") as fh:
                fh.write(str(pids))
        return made
    roots = v1_controller_roots(mounts)
    for ctrl, file, value in (("memory", "memory.limit_in_bytes", memory), ("pids", "pids.max", pids)):
        if value is None:
            continue
        path = os.path.join(roots[ctrl], name)
        os.mkdir(path)
        made.append(path)
        with open(os.path.join(path, file), "w") as fh:
            fh.write(str(value))
    return made


@pytest.fixture
def enclosed(unprivileged_user):
    """``enclosed(pids)`` -> the user, running in root-owned limit cgroups instead of delegated ones."""
    made: list[str] = []

    def make(pids: int | None):
        groups = limit_cgroups(MEMORY, pids)
        made.extend(groups)
        return replace(unprivileged_user, cgroups=tuple(groups))

    yield make
    for path in made:
        remove_cgroup(path)


def caps(**resources) -> dict:
    return {"shell": {"allow": ["bash", "python3", "setsid", "sleep"], "interpreter_runtime": [
        {"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]},
        "resources": {"cgroup_memory_bytes": MEMORY, **resources}}


def test_the_enclosing_cgroup_bounds_the_tool_tree(enclosed, record_escape):
    user = enclosed(pids=64)
    out = run_sessions(user, {"sessions": [{"caps": caps(cgroup_pids_max=64)}], "calls": [
        [0, {"binary": "bash", "command": FORKS}],
        [0, {"binary": "python3", "args": ["-c", BOMB]}],
        [0, {"binary": "bash", "command": "setsid sleep 300 >/dev/null 2>&1 </dev/null & echo started"}],
        [0, {"binary": "bash", "command": "echo still here"}],
    ]}, prefix=READ_ONLY_CGROUPS)
    session = out["sessions"][0]
    assert session["aggregate"] == "enclosing-cgroup", session
    (warning,) = [m for c, m in session["warnings"] if c == "W-SEC-005"]
    assert "the aggregate bound is the cgroup mur runs in, shared with the runtime" in warning
    forks, bomb, daemon, alive = session["results"]
    assert forks["resource_limit"] == "cgroup_pids_max" and "Resource temporarily unavailable" in forks["stderr"]
    assert bomb["exit_code"] == 137, bomb
    assert bomb["resource_limit"] == "cgroup_memory_bytes" and bomb["stdout"] == ""
    assert daemon["stdout"] == "started\n" and alive["stdout"] == "still here\n"  # mur outlived the OOM kill
    left = [p["pid"] for p in session["processes_after"]]
    assert left, "the daemon was not found among the session's processes"
    assert all(not os.path.exists(f"/proc/{pid}") for pid in left), "a tool's daemon outlived the session"
    # controls (bounded): without the cgroup the same allocation and 80 concurrent children succeed
    bare = subprocess.run([SYSTEM_PYTHON, "-c", BOMB], capture_output=True, text=True, timeout=60)
    assert bare.returncode == 0 and bare.stdout == "allocated\n"
    many = subprocess.run(["bash", "-c", "for i in $(seq 80); do sleep 1 & done; wait; echo done"],
                          capture_output=True, text=True, timeout=60)
    assert many.stdout == "done\n"
    record_escape("fork + memory bomb, left daemon: no session cgroup (read-only cgroupfs)",
                  "pids.max / OOM of the enclosing cgroup, attributed; daemon killed", "bare: allocates, forks")


def test_without_a_pids_max_rlimit_nproc_bounds_the_tasks(enclosed):
    user = enclosed(pids=None)
    out = run_sessions(user, {"sessions": [{"caps": caps(cgroup_pids_max=48, max_processes=128)}], "calls": [
        [0, {"binary": "bash", "command": FORKS}],
    ]}, prefix=READ_ONLY_CGROUPS)
    session = out["sessions"][0]
    assert session["aggregate"] == "enclosing-cgroup+nproc"
    assert session["rlimits"]["NPROC"] == 48  # max_processes capped at cgroup_pids_max (a user namespace: from 0)
    (forks,) = session["results"]
    assert "Resource temporarily unavailable" in forks["stderr"] and forks["resource_limit"] is None  # the spec


def test_a_bound_above_the_manifests_is_e_run_012(enclosed):
    user = enclosed(pids=64)
    with pytest.raises(AssertionError) as info:
        run_sessions(user, {"sessions": [{"caps": caps(cgroup_memory_bytes=MEMORY // 2)}], "calls": []},
                     prefix=READ_ONLY_CGROUPS)
    assert "E-RUN-012" in str(info.value) and f"bounds memory at {MEMORY} bytes, above" in str(info.value)
