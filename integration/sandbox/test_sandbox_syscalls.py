"""seccomp as an allowlist (issue 12, class 5): what is not named is refused, a foreign architecture
is killed, and nothing a legitimate tool needs breaks (bash, python3, coreutils, jq, git, pipes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest

from escape_scripts import INT80, LEGIT, LEGIT_OUT, PY, TOOLS, UNLISTED  # type: ignore[import-not-found]
from sbx_support import HOST_ENV, SYSTEM_PYTHON, capabilities  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]
MISSING = [t for t in TOOLS if shutil.which(t) is None]  # a minimal host (the kernel-matrix VMs) lacks jq, git


def bare_python(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([SYSTEM_PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=HOST_ENV,
                          cwd=cwd)


def test_syscalls_not_on_the_allowlist_get_enosys(sandbox, tmp_path, record_escape):
    sb = sandbox()
    r = sb.run("python3", args=["-c", UNLISTED])
    got = json.loads(r.stdout)
    assert got["fchmodat2"] == got["cachestat"] == got["lsm_list_modules"] == got["mbind_unknown_999"] == "ENOSYS"
    assert got["ustat"] == "ENOSYS"
    assert got["modify_ldt"] == got["move_pages"] == "EPERM"  # named refusals
    control = json.loads(bare_python(UNLISTED, tmp_path).stdout)
    assert control["ustat"] == "EINVAL"  # reaches the kernel bare (dev 0 is no filesystem)
    if tuple(int(n) for n in os.uname().release.split("-")[0].split(".")[:2]) >= (6, 6):  # fchmodat2: 6.6+
        assert control["fchmodat2"] == "ok"
    record_escape("syscalls off the allowlist (fchmodat2, lsm_*, ...)", "ENOSYS / EPERM", "fchmodat2 works")


def test_a_foreign_architecture_syscall_kills_the_tool(sandbox, tmp_path, record_escape):
    sb = sandbox()
    r = sb.run("python3", args=["-c", INT80])
    assert r.signal == signal.SIGSYS and r.stdout == ""
    control = bare_python(INT80, tmp_path)
    assert control.returncode == 0 and int(control.stdout) > 1  # the i386 getpid answered
    record_escape("i386 int 0x80 from a 64-bit tool", "killed (SIGSYS)", "returns the pid")


@pytest.mark.skipif(bool(MISSING), reason=f"not installed: {' '.join(MISSING)}")
def test_legitimate_tools_still_work(sandbox, tmp_path):
    sb = sandbox(capabilities(allow=TOOLS))
    (sb.live_workdir / "py.py").write_text(PY)
    # git reads /etc/gitconfig, which Landlock does not grant: the system config is skipped explicitly
    r = sb.run("bash", command=LEGIT, env=[("GIT_CONFIG_NOSYSTEM", "1")])
    (tmp_path / "py.py").write_text(PY)
    control = subprocess.run(["bash", "-c", LEGIT], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             env=dict(HOST_ENV, HOME=str(tmp_path), GIT_CONFIG_NOSYSTEM="1"))
    assert control.returncode == 0, control.stderr
    assert r.exit_code == 0, r.stderr
    assert r.stdout == control.stdout
    sha = subprocess.run(["sha256sum", str(tmp_path / "in.txt")], capture_output=True, text=True).stdout[:16]
    assert r.stdout == LEGIT_OUT.format(sha=sha)


def test_as_another_user_the_allowlist_holds_and_tools_work(unprivileged_user, tmp_path):
    from asuser import run_sessions  # type: ignore[import-not-found]
    from sbx_support import python_stdlib  # type: ignore[import-not-found]

    tools = [t for t in TOOLS if t not in MISSING]
    caps = {"shell": {"allow": tools, "interpreter_runtime": [
        {"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]}}
    legit_call = LEGIT if not MISSING else "true"  # the legitimate-tools half needs every tool
    out = run_sessions(unprivileged_user, {"sessions": [{"caps": caps}], "calls": [
        [0, {"binary": "python3", "args": ["-c", f"open('py.py', 'w').write({PY!r})"]}],
        [0, {"binary": "bash", "args": ["-c", "export GIT_CONFIG_NOSYSTEM=1\n" + legit_call]}],
        [0, {"binary": "python3", "args": ["-c", UNLISTED]}],
        [0, {"binary": "python3", "args": ["-c", INT80]}],
    ]})
    session = out["sessions"][0]
    assert session["namespaces"] == ["user", "net", "ipc", "mnt", "pid"]
    legit, unlisted, int80 = session["results"][1:]
    assert legit["exit_code"] == 0, legit["stderr"]
    if not MISSING:
        (tmp_path / "in.txt").write_text("b\na\nc\n")
        sha = subprocess.run(["sha256sum", str(tmp_path / "in.txt")], capture_output=True, text=True).stdout[:16]
        assert legit["stdout"] == LEGIT_OUT.format(sha=sha)
    got = json.loads(unlisted["stdout"])
    assert got["fchmodat2"] == "ENOSYS" and got["move_pages"] == "EPERM"
    assert int80["exit_code"] == 128 + signal.SIGSYS
