"""Issue 27 through a real `mur run`, driven by the scripted hostile model, as root and as a non-root
user: a writer past the disk ceiling (refused by the kernel, reported as E-RUN-013 with the bytes),
a directory chain 5,000 levels deep, and the host's metadata outside the grants -- each next to its
control, and each followed by a rerun on the same --workdir, which must simply work.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from disk_attacks import DEEP, FILL, PEEK  # type: ignore[import-not-found]
from hostile import FINAL_TEXT, SYSTEM_PYTHON, remove_tree  # type: ignore[import-not-found]
from mur.sandbox.diskplan import RUNTIME_HEADROOM as HEADROOM
from mur.sandbox.probe import probe_host

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

CEILING = 8 << 20


def py(script: str, *args: str) -> str:
    assert "PYEOF" not in script
    return f"python3 - {' '.join(args)} <<'PYEOF'\n{script}\nPYEOF"


@pytest.fixture(params=["root", "non-root"])
def who(request):
    probe = probe_host()
    if not probe.sealed:
        pytest.skip(f"no composed root here: {probe.sealed_reason}")
    return None if request.param == "root" else request.getfixturevalue("unprivileged_user")


@pytest.fixture
def workdirs(who, tmp_path):
    """``make(name)``: a --workdir for ``who``; removed iteratively at the end (its tools leave deep trees)."""
    made = []

    def make(name: str):
        base = who.home if who is not None else tmp_path
        path = base / name
        path.mkdir()
        if who is not None:
            who.chown(path)
        made.append(path)
        return path

    yield make
    for path in made:
        remove_tree(path)


def grants(run) -> dict:
    return run.events("session_start")[0]["effective_grants"]


def test_a_writer_past_the_ceiling_is_refused_and_reported_then_a_rerun_works(hostile, who, tmp_path, workdirs,
                                                                              record_escape):
    capsule = hostile(user=who, capabilities=f"resources:\n  workdir_max_bytes: {CEILING}")
    work = workdirs("fill-work")
    run = capsule.run([py(FILL, str(3 * CEILING))], workdir=work)
    assert run.returncode == 1, run.describe()
    assert "error[E-RUN-013]" in run.stderr and "bytes in use" in run.stderr, run.stderr
    g = grants(run)
    assert g["disk_ceiling"] == ("ext4-loop" if who is None else "tmpfs") and g["disk_ceiling_bytes"] == CEILING
    got = json.loads(run.results[0].data.split("\n[stderr]")[0].strip().splitlines()[-1])
    assert got["error"] in ("ENOSPC", "EDQUOT") and got["got"] <= CEILING + HEADROOM, got
    assert os.stat(work / "fill.bin").st_blocks * 512 <= CEILING + HEADROOM  # what came back to the --workdir
    again = capsule.run(["ls -la fill.bin >/dev/null && echo rerun-ok"], workdir=work)
    assert again.returncode == 0 and again.results[0].data == "rerun-ok\n", again.describe()
    control = subprocess.run([SYSTEM_PYTHON, "-c", FILL, str(3 * CEILING)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
    assert json.loads(control.stdout)["got"] == 3 * CEILING
    os.unlink(tmp_path / "fill.bin")
    tag = "root" if who is None else "non-root"
    record_escape(f"mur run: write past workdir_max_bytes ({tag})", f"{got['error']} at the ceiling, E-RUN-013; "
                  "rerun ok", "bare: writes 24 MiB")


def test_a_deep_tree_and_the_hosts_metadata_then_a_rerun(hostile, who, tmp_path, workdirs, record_escape):
    capsule = hostile(user=who, capabilities="resources:\n  workdir_max_bytes: 67108864")
    work = workdirs("deep-work")
    private = (who.home if who is not None else tmp_path) / "private"
    private.mkdir()
    (private / "notes.txt").write_text("private\n")
    os.setxattr(private / "notes.txt", "user.mur", b"v")
    os.symlink("/only/the/host/knows", private / "pointer")
    peek = [str(private / "notes.txt"), str(private / "pointer"), "/etc/passwd", str(private)]
    if who is not None:
        who.chown(private)
    run = capsule.run([py(DEEP, "5000"), py(PEEK, *peek), "cd .. && ls; echo rc=$?"], workdir=work)
    assert run.returncode == 0 and run.result_text == FINAL_TEXT, run.describe()
    assert json.loads(run.results[0].data.strip().splitlines()[-1])["got"] == 5000
    seen = json.loads(run.results[1].data.strip().splitlines()[-1])
    for path in peek:
        assert set(seen[path].values()) == {"ENOENT"}, (path, seen[path])
    assert grants(run)["host_view"] == "composed-root"
    again = capsule.run(["cd d/d/d/d/d && echo rerun-ok"], workdir=work)  # copy-in at any depth
    assert again.returncode == 0 and again.results[0].data == "rerun-ok\n", again.describe()
    trace = subprocess.run([*capsule._mur(), "trace", "show", str(run.session / "trace.jsonl")],
                           capture_output=True, text=True, timeout=60, cwd=capsule.root)
    assert trace.returncode == 0, trace.stderr  # the record of a session whose tools made the tree
    prefix = [] if who is None else ["setpriv", f"--reuid={who.uid}", f"--regid={who.gid}", "--clear-groups", "--"]
    control = json.loads(subprocess.run([*prefix, SYSTEM_PYTHON, "-c", PEEK, *peek], capture_output=True,
                                        text=True, timeout=60).stdout)
    assert control[peek[0]]["getxattr"] == "ok" and control[peek[1]]["readlink"] == "ok"
    tag = "root" if who is None else "non-root"
    record_escape(f"mur run: 5000-level tree, stat/readlink/getxattr outside ({tag})",
                  "ENOENT outside; rerun on the --workdir ok", "bare: reads the xattr and the link target")


def test_staging_over_a_deep_tree_a_previous_session_left(hostile, who, workdirs, record_escape):
    """The agent loop's own staging is a door too: tools/<artifact>/ holding a 5,000-level chain (a
    previous runtime's tools left it, or a user) is removed iteratively before the run, which works."""
    capsule = hostile(user=who)
    work = workdirs("staging-work")
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    for name in ("tools", "murmur-driver-anthropic"):
        os.mkdir(name, dir_fd=fd)
        nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    for _ in range(5000):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    if who is not None:
        subprocess.run(["chown", "-R", f"{who.uid}:{who.gid}", str(work)], check=True)
    run = capsule.run(["ls tools/murmur-driver-anthropic | sort | tr '\\n' ' '"], workdir=work)
    assert run.returncode == 0 and run.result_text == FINAL_TEXT, run.describe()
    assert "d" not in run.results[0].data.split()  # staged afresh
    tag = "root" if who is None else "non-root"
    record_escape(f"mur run: staging over a 5000-level tree in tools/ ({tag})", "removed iteratively, run ok",
                  "shutil.rmtree: RecursionError")
