"""The tools' mount view: metadata changes outside the write scope.

Landlock mediates opening, creating, renaming, linking and truncating, but not chmod, chown,
utime(s) or setxattr: a tool could change the mode, times or extended attributes of any file its
uid owns outside the workdir. As non-root that is mur's uid: the session record (trace.jsonl),
~/.murmur, the user's home. As root it is the leased session uid, which a later session reuses: a
file an earlier session of that uid left outside this one's workdir. The session's mount namespace
makes every mount read-only except the workdir's own (namespaces.py), so those calls get EROFS;
where the tools run in a composed root (viewplan.py, ``sealed``) the files do not exist for them at
all (ENOENT). Each test runs both ways: the host's view, and the read-only fallback (a probe that
says the composed root cannot be built here).

Each attack beside its control: the same command succeeds as a plain process of that uid, and on a
file inside the workdir.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from asuser import bare_as  # type: ignore[import-not-found]
from mur.sandbox.isolation import WRITABLE_VIEW
from mur.sandbox.probe import probe_host
from sbx_support import capabilities  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

EROFS = "Read-only file system"
ENOENT = "No such file or directory"
HIDDEN = {"composed-root": ENOENT, "read-only-host": EROFS}


@pytest.fixture(params=["composed-root", "read-only-host"])
def view(request):
    """(the view under test, the probe that gives it)."""
    probe = probe_host()
    if request.param == "composed-root" and not probe.sealed:
        pytest.skip(f"no composed root on this host: {probe.sealed_reason}")
    return request.param, (probe if request.param == "composed-root" else
                           replace(probe, sealed=False, sealed_reason="simulated", achieved="scoped"))
OLD = "2001-01-01 00:00:00"
ALLOW = ("bash", "chmod", "touch", "stat", "python3")


def attacks(target: str) -> str:
    """chmod, touch -d, setxattr and os.utime on ``target``; one rc= line each."""
    return (f"chmod 777 {target}; echo rc=$?; touch -d '{OLD}' {target}; echo rc=$?; "
            f"python3 -c \"import os; os.setxattr('{target}', 'user.mur', b'x')\"; echo rc=$?; "
            f"python3 -c \"import os; os.utime('{target}', (0, 0))\"; echo rc=$?")


IN_SCOPE = ("echo x > mine.txt && chmod 640 mine.txt && touch -d '2001-01-01 00:00:00' mine.txt && "
            "python3 -c \"import os; os.setxattr('mine.txt', 'user.mur', b'x'); print(os.getxattr('mine.txt', 'user.mur'))\""
            " && stat -c '%a %Y' mine.txt")


def in_scope_done(stdout: str) -> bool:
    """The control's output: the xattr read back, then mode 640 and a 2001 mtime."""
    lines = stdout.splitlines()
    mode, mtime = lines[-1].split()
    return lines[-2] == "b'x'" and mode == "640" and int(mtime) < 10 ** 9


def metadata(path: Path) -> tuple:
    st = os.stat(path)
    return st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, tuple(sorted(os.listxattr(path)))


def rc_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("rc=")]


def refused_read_only(text: str, what: str, kind: str = "read-only-host") -> None:
    codes = rc_lines(text)
    assert len(codes) == 4 and "rc=0" not in codes, f"{what}: allowed: {text}"
    assert HIDDEN[kind] in text, f"{what}: refused, but not by the {kind} view: {text}"


def test_a_non_root_tool_cannot_change_metadata_of_its_uids_files_outside_the_workdir(
        hostile, unprivileged_user, record_escape):
    user = unprivileged_user
    victim = user.home / "notes.txt"  # the user's own file in their home
    victim.write_text("mine\n")
    control = user.home / "control.txt"
    control.write_text("mine too\n")
    for path in (victim, control):
        os.chown(path, user.uid, user.gid)
        os.chmod(path, 0o600)
    before = metadata(victim)
    run = hostile(user=user, shell_allow=ALLOW).run([
        "stat -c '%a %u' ../trace.jsonl; " + attacks("../trace.jsonl"),  # 0: the session record
        attacks(str(victim)),  # 1: a file in the user's home
        f"chmod 777 ..; echo rc=$?; chmod 777 {user.home}; echo rc=$?; chmod 777 {user.home}/.murmur; echo rc=$?; "
        f"touch -d '{OLD}' ..; echo rc=$?",  # 2: the session directory, the home, ~/.murmur
        IN_SCOPE,  # 3: the control inside the workdir
    ])
    assert run.returncode == 0, run.describe()
    kind = "composed-root" if probe_host().sealed else "read-only-host"
    first = run.results[0].data
    if kind == "read-only-host":
        trace_mode, trace_uid = first.splitlines()[0].split()
        assert int(trace_uid) == user.uid  # the same uid: only the mount view stands between
        first = "\n".join(first.splitlines()[1:])
    else:
        assert "stat: cannot statx '../trace.jsonl': No such file or directory" in first, first
    refused_read_only(first, "trace.jsonl", kind)
    trace = run.session / "trace.jsonl"
    st = os.stat(trace)
    assert st.st_mode & 0o7777 != 0o777 and "user.mur" not in os.listxattr(trace)
    assert st.st_mtime > 10 ** 9  # never the forged times (2001, or the epoch)
    refused_read_only(run.results[1].data, "a file in the user's home", kind)
    assert metadata(victim) == before
    home = run.results[2].data
    assert rc_lines(home) and "rc=0" not in rc_lines(home) and (EROFS in home or ENOENT in home), home
    assert os.stat(user.home).st_mode & 0o777 != 0o777 and os.stat(run.session).st_mode & 0o777 != 0o777
    assert run.results[3].ok and in_scope_done(run.results[3].data), run.results[3].data
    assert os.stat(run.accessible / "mine.txt").st_mode & 0o777 == 0o640
    # the control: the same calls as a plain process of the user change the file
    for argv in (["chmod", "777", str(control)], ["touch", "-d", OLD, str(control)],
                 ["python3", "-c", f"import os; os.setxattr('{control}', 'user.mur', b'x')"]):
        done = bare_as(user, argv)
        assert done.returncode == 0, (argv, done.stderr)
    st = os.stat(control)
    assert st.st_mode & 0o777 == 0o777 and "user.mur" in os.listxattr(control)
    record_escape("chmod/touch/setxattr outside the workdir (non-root)", f"{HIDDEN[kind]}, files unchanged",
                  "the same calls as a plain process of the uid, and inside the workdir, succeed")


def test_a_root_runs_leased_uid_cannot_change_metadata_of_its_files_outside_the_workdir(
        sandbox, outside, view, record_escape):
    """As root the tools' uid is leased per session, and a later session reuses it: a file an
    earlier session of that uid left outside this workdir is the case the mount view covers."""
    kind, probe = view
    sb = sandbox(capabilities(allow=ALLOW), probe=probe)
    assert sb.policy.run_as is not None and "mnt" in sb.policy.namespaces
    uid, gid = sb.policy.run_as
    victim, control = outside / "left-by-an-earlier-session.txt", outside / "control.txt"
    for path in (victim, control):
        path.write_text("x\n")
        os.chown(path, uid, gid)
        os.chmod(path, 0o600)
    before = metadata(victim)
    r = sb.run("bash", command=attacks(str(victim)))
    refused_read_only(r.stdout + r.stderr, "a leased-uid file outside the workdir", kind)
    assert metadata(victim) == before
    assert sb.namespaces is not None and sb.namespaces.view == ("read-only" if kind == "read-only-host" else kind)
    inside = sb.run("bash", command=IN_SCOPE)
    assert inside.exit_code == 0 and in_scope_done(inside.stdout), inside.stderr
    for argv in (["chmod", "777", str(control)], ["touch", "-d", OLD, str(control)]):
        done = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv],
                              capture_output=True, text=True)
        assert done.returncode == 0, (argv, done.stderr)
    assert os.stat(control).st_mode & 0o777 == 0o777
    record_escape(f"chmod/touch/setxattr outside the workdir (root, {kind})", f"{HIDDEN[kind]}, file unchanged",
                  "the same calls as a plain process of the leased uid succeed")


def test_without_a_mount_namespace_the_writable_view_is_logged(sandbox):
    """A host that refuses namespaces (a container's default seccomp profile) keeps the old view;
    the session log says what that leaves open. Control: with namespaces nothing is logged."""
    notes: list[str] = []
    sandbox(capabilities(allow=ALLOW), probe=replace(probe_host(), netns=False), log=notes.append)
    assert any(WRITABLE_VIEW in n for n in notes), notes
    control: list[str] = []
    sb = sandbox(capabilities(allow=ALLOW), own_workdir=True, log=control.append)
    assert sb.namespaces is not None and sb.namespaces.view in ("read-only", "composed-root")
    assert not any(WRITABLE_VIEW in n for n in control), control


def test_workdir_exec_sessions_get_the_read_only_view_too(sandbox, outside, view):
    """filesystem.workdir_exec leaves out the noexec, not the mount namespace: a binary copied into
    the workdir runs (the control), a file of the tools' uid outside it keeps its mode."""
    kind, probe = view
    sb = sandbox(capabilities(allow=ALLOW, filesystem={"workdir_exec": True}), probe=probe)
    assert "mnt" in sb.policy.namespaces and sb.policy.noexec_workdir is None
    copy = sb.live_workdir / "mytrue"
    copy.write_bytes(Path("/usr/bin/true").read_bytes())
    os.chmod(copy, 0o755)
    victim = outside / "theirs.txt"
    victim.write_text("x\n")
    os.chown(victim, *sb.policy.run_as)
    os.chmod(victim, 0o600)
    r = sb.run("bash", command=f"./mytrue; echo rc=$?; chmod 777 {victim}; echo rc=$?")
    assert rc_lines(r.stdout) == ["rc=0", "rc=1"] and HIDDEN[kind] in r.stderr, (r.stdout, r.stderr)
    assert os.stat(victim).st_mode & 0o777 == 0o600
