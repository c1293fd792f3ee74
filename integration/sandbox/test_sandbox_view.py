"""The host hidden, not just closed (issue 27): tools run in a root built for the session, so a path
outside the grants does not exist for them -- its existence, size, owner, times, a link's target and
an extended attribute's value are out of reach, where Landlock alone let stat, readlink and getxattr
through. Each attack beside its control: the same calls as a plain process of that uid succeed.
As root (the leased uid) and as a non-root user (mur's own uid, in a user namespace).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from asuser import run_sessions  # type: ignore[import-not-found]
from disk_attacks import PEEK  # type: ignore[import-not-found]
from mur.sandbox.probe import probe_host
from sbx_support import SYSTEM_PYTHON, capabilities, python_stdlib  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

ALLOW = ("bash", "python3", "cat")
CALLS = ("stat", "readlink", "getxattr", "listxattr", "access", "listdir")


@pytest.fixture(scope="module", autouse=True)
def composed():
    probe = probe_host()
    if not probe.sealed:
        pytest.skip(f"no composed root on this host: {probe.sealed_reason}")


def plant(base: Path, owner: tuple[int, int]) -> list[str]:
    """Host paths outside every grant, readable by ``owner`` under plain permissions."""
    base.mkdir(parents=True, exist_ok=True)
    secret = base / "notes.txt"
    secret.write_text("private notes\n")
    os.setxattr(secret, "user.mur", b"a value")
    link = base / "pointer"
    if not link.is_symlink():
        os.symlink("/somewhere/only/the/host/knows", link)
    for path in (base, secret):
        os.chown(path, *owner)
    os.chown(link, *owner, follow_symlinks=False)
    os.setxattr(base, "user.mur", b"dir value")
    return [str(base), str(secret), str(link), "/etc/passwd", "/usr/bin/sudo", "/var/log"]


def hidden(result: dict, paths: list[str]) -> None:
    for path in paths:
        got = result[path]
        assert set(got.values()) == {"ENOENT"}, (path, got)


def shown(result: dict, path: str, calls: tuple[str, ...]) -> None:
    assert all(result[path][c] == "ok" for c in calls), (path, result[path])


def test_host_metadata_outside_the_grants_does_not_exist_as_root(sandbox, outside, record_escape):
    sb = sandbox(capabilities(allow=ALLOW))
    assert sb.policy.host_view == "composed-root"
    uid, gid = sb.policy.run_as
    base = outside / "host"  # a directory the leased uid can reach under plain permissions
    paths = plant(base, (uid, gid))
    r = sb.run("python3", args=["-c", PEEK, *paths])
    hidden(json.loads(r.stdout), paths)
    # the control: the same uid, bare, learns all of it
    control = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", SYSTEM_PYTHON,
                              "-c", PEEK, *paths], capture_output=True, text=True, timeout=60)
    seen = json.loads(control.stdout)
    shown(seen, str(base / "notes.txt"), ("stat", "getxattr", "listxattr", "access"))
    shown(seen, str(base / "pointer"), ("stat", "readlink"))
    shown(seen, "/etc/passwd", ("stat", "access"))
    record_escape("stat/readlink/getxattr outside the grants (root)", "ENOENT: not in the tools' root",
                  "the leased uid, bare, reads size, owner, link target, xattr")


def test_host_metadata_outside_the_grants_does_not_exist_as_a_user(unprivileged_user, record_escape):
    user = unprivileged_user
    paths = plant(user.home / "private", (user.uid, user.gid))
    shell = {"allow": list(ALLOW), "interpreter_runtime": [
        {"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]}
    out = run_sessions(user, {"sessions": [{"caps": {"shell": shell}}],
                              "calls": [[0, {"binary": "python3", "args": ["-c", PEEK, *paths]}]]})
    session = out["sessions"][0]
    assert session["view"] == "composed-root" and "user" in session["namespaces"]
    hidden(json.loads(session["results"][0]["stdout"]), paths)
    control = subprocess.run(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--",
                              SYSTEM_PYTHON, "-c", PEEK, *paths], capture_output=True, text=True, timeout=60)
    seen = json.loads(control.stdout)
    shown(seen, paths[1], ("stat", "getxattr", "listxattr", "access"))  # the user's own file: all of it
    shown(seen, paths[2], ("stat", "readlink"))
    record_escape("stat/readlink/getxattr outside the grants (non-root)", "ENOENT: not in the tools' root",
                  "the same uid, bare, reads all of it")


def test_what_the_root_holds_and_nothing_else(sandbox):
    """The view as the runtime reaches it: the top of the tools' root, /dev, /proc, a private /tmp."""
    sb = sandbox(capabilities(allow=ALLOW))
    live = sb.namespaces.live_root
    top = sorted(os.listdir(live))
    workdir_top = str(sb.workdir).split("/")[1]
    assert set(top) <= {"bin", "dev", "lib", "lib64", "proc", "tmp", "usr", "sbin", workdir_top}, top
    assert "etc" not in top and "root" not in top and "home" not in top and "var" not in top
    assert sorted(os.listdir(live + "/dev")) == ["fd", "full", "null", "random", "stderr", "stdin", "stdout",
                                                 "urandom", "zero"]
    r = sb.run("bash", command="echo hi > /tmp/planted-by-a-tool && cat /tmp/planted-by-a-tool && echo $TMPDIR")
    assert r.exit_code == 0 and r.stdout == "hi\n/tmp\n", r.stderr
    assert not os.path.exists("/tmp/planted-by-a-tool")  # the private /tmp, on the session disk
    r = sb.run("python3", args=["-c", (
        "import os\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
        "open('/dev/null', 'w').write('x'); print(len(open('/dev/urandom', 'rb').read(4)))\n"
        "print(os.path.exists('/dev/sda'), os.path.exists('/sys'), os.path.exists('/proc/meminfo'))")])
    pids, urandom, absent = r.stdout.splitlines()
    assert all(int(p) < 50 for p in json.loads(pids.replace("'", '"'))), pids  # the session's pid namespace only
    assert urandom == "4" and absent == "False False False", r.stdout


def test_a_session_without_a_composed_root_says_why(sandbox):
    from dataclasses import replace

    probe = replace(probe_host(), sealed=False, sealed_reason="simulated blocker", achieved="scoped")
    notes: list[str] = []
    sb = sandbox(capabilities(allow=ALLOW), probe=probe, log=notes.append)
    assert sb.policy.view is None and sb.policy.host_view == "read-only-host"
    assert "simulated blocker" in sb.policy.view_reason and any("simulated blocker" in n for n in notes)
    warning = dict(sb.warnings)["W-SEC-005"]
    assert "they see the host's tree" in warning and "simulated blocker" in warning
