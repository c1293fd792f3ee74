"""What is true on a host, read from one command's output, and the state derived from it: the
serving release comes from the process on the port, never from the record."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mur.deploy.apply import symlink_command
from mur.deploy.cleanup import sweep_command
from mur.deploy.deadlines import Deadlines
from mur.deploy.observe import derive, observe_command, parse_observation, release_of
from mur.deploy.steps import Layout, ServiceState
from mur.deploy.undo import Attempt, Phase
from mur.errors import MurError

DEP = "dep_" + "b" * 32
LAY = Layout("/home/u", DEP)
UP = ServiceState("running", running=True, ready=True)
LOOPING = ServiceState("backoff", running=True, restarts=4, last_exit=3, looping=True)
DOWN = ServiceState("stopped", exited=True)


def view(current=2, releases=(1, 2), partial=(), staging=(), serving=None, lock=None):
    lines = [f"@@current releases/{current}" if current else "@@current "]
    lines += [f"@@release {n} " + json.dumps({"n": n, "digest": f"d{n}", "capsule": {"version": f"1.{n}"}})
              for n in releases]
    lines += [f"@@partial {n}" for n in partial] + [f"@@staging {s}" for s in staging]
    if serving is not None:
        lines.append(f"@@serving 42 {LAY.releases}/{serving}")
    if lock:
        lines.append(f"@@lock held 1100 {lock}")
    return parse_observation("\n".join(lines) + "\n", LAY)


def test_the_observation_parses():
    v = view(partial=(3,), staging=("release-4-ab",), serving=1)
    assert v.current == 2 and sorted(v.releases) == [1, 2] and v.partial == [3] and v.staging == ["release-4-ab"]
    assert v.serving == 1 and v.serving_pid == 42 and v.meta(2)["capsule"]["version"] == "1.2"
    assert v.older_complete(2) == [1] and v.numbers == [1, 2, 3]
    assert release_of(f"{LAY.releases}/7/work", LAY) == 7 and release_of("/elsewhere/releases/7", LAY) is None
    absent = parse_observation("@@absent\n", LAY)
    assert not absent.exists and absent.current is None


@pytest.mark.parametrize("case, state", [
    (dict(v=view(serving=2), svc=UP, answers=True, record=2), "running"),
    (dict(v=view(serving=1), svc=UP, answers=True, record=1), "diverged"),  # switched, never restarted
    (dict(v=view(serving=2), svc=UP, answers=True, record=1), "running"),  # a stale record follows the target
    (dict(v=view(serving=2), svc=UP, answers=True, record=1, pending={"command": "deploy"}), "running"),
    (dict(v=view(serving=None), svc=LOOPING, answers=False, record=2), "crash-looping"),
    (dict(v=view(serving=None), svc=DOWN, answers=False, record=2), "stopped"),
    (dict(v=view(serving=2), svc=DOWN, answers=True, record=2), "diverged"),  # an orphan serves
    (dict(v=view(serving=2, staging=("release-3-x",)), svc=UP, answers=True, record=2), "incomplete"),
    (dict(v=view(serving=None), svc=DOWN, answers=False, record=2, pending={"command": "deploy"}), "incomplete"),
    (dict(v=view(serving=2, staging=("release-3-x",), lock='{"command": "mur deploy", "token": "o"}'),
          svc=UP, answers=True, record=2), "running"),  # another command's staging is not left over
    (dict(v=view(current=None, releases=(), serving=None), svc=DOWN, answers=False, record=None), "stopped"),
])
def test_states_are_derived_from_what_serves(case, state):
    truth = derive(case["v"], case["svc"], case["answers"], case["record"], case.get("pending"))
    assert truth.state == state, truth.reason


def test_a_crash_loop_says_how_often_and_how_it_ended():
    truth = derive(view(), LOOPING, False, 2, None)
    assert truth.restarts == 4 and truth.last_exit == 3 and "4 restarts, last exit status 3" in truth.reason


def test_a_consistent_target_lets_the_record_follow_it():
    truth = derive(view(serving=2), UP, True, 1, {"command": "deploy"})
    assert truth.consistent and truth.current == truth.serving == 2


def test_the_attempt_guards_its_door_and_undoes_newest_first():
    a = Attempt("t")
    with pytest.raises(MurError):
        a.at(Phase.RECORDED)
    done = []
    a.push("first", lambda: done.append(1))
    a.push("second", lambda: done.append(2))
    assert a.undo(5.0) == [] and done == [2, 1] and a.phase is Phase.UNDONE
    b = Attempt("t")
    b.push("kept", lambda: done.append(3))
    b.push("fails", lambda: (_ for _ in ()).throw(MurError("E-DEPLOY-003", "gone")))
    assert b.undo(5.0) == ["fails", "kept"] and b.phase is Phase.LEFT


def test_deadlines_come_from_the_environment():
    d = Deadlines.from_env({"MUR_DEPLOY_DEAD_AFTER": "3", "MUR_DEPLOY_KEEPALIVE": "0.5"})
    assert d.dead_after == 3 and d.keepalive == 0.5 and d.lock_release == 3.5 and d.connect == 10
    for bad in ({"MUR_DEPLOY_UNDO_BUDGET": "soon"}, {"MUR_DEPLOY_UNDO_BUDGET": "0"},
                {"MUR_DEPLOY_DEAD_AFTER": "1", "MUR_DEPLOY_KEEPALIVE": "2"}):
        with pytest.raises(MurError) as err:
            Deadlines.from_env(bad)
        assert err.value.code == "E-DEPLOY-001"


def sh(cmd: str) -> str:
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout


def test_a_replacement_cut_between_its_two_steps_is_seen_and_swept(tmp_path):
    """The link swap writes `current.mur-tmp` and renames it over `current`; a kill between the two
    (a power-off in a CI rehearsal) leaves the name beside a consistent release. `status` must not
    call that clean `running`, and the next deploy's sweep removes it and nothing else."""
    lay = Layout(str(tmp_path), DEP)
    root = Path(lay.root)
    for n in (1, 2):
        (root / "releases" / str(n)).mkdir(parents=True)
        (root / "releases" / str(n) / "release.json").write_text(json.dumps({"n": n}))
    sh(symlink_command("releases/2", lay.current))
    assert os.readlink(lay.current) == "releases/2" and not list(root.glob("*mur-tmp*"))
    before = os.lstat(lay.current).st_ino
    sh(symlink_command("releases/2", lay.current))  # already right: nothing written, no window
    assert os.lstat(lay.current).st_ino == before
    sh(symlink_command("releases/1", lay.current))
    assert os.readlink(lay.current) == "releases/1" and not list(root.glob("*mur-tmp*"))

    clean = parse_observation(sh(observe_command(lay, None)), lay)
    assert clean.current == 1 and not clean.tmp and sorted(clean.releases) == [1, 2]
    os.symlink("releases/2", f"{lay.current}.mur-tmp")  # the cut swap: its first step only
    (root / "releases" / "2" / "mur.mur-tmp-1a2b").write_text("half")  # a cut upload
    (root / "releases" / "2" / "keep.txt").write_text("a release's own file")
    cut = parse_observation(sh(observe_command(lay, None)), lay)
    assert sorted(cut.tmp) == ["current.mur-tmp", "releases/2/mur.mur-tmp-1a2b"]
    truth = derive(cut, UP, True, 1, None)
    assert truth.state == "incomplete" and "current.mur-tmp" in truth.reason and not truth.consistent
    locked = parse_observation(sh(observe_command(lay, None)) + '@@lock held 1100 {"command": "mur deploy", '
                               '"token": "o"}\n', lay)
    assert derive(locked, UP, True, 1, None).state == "running"

    swept = [ln[8:] for ln in sh(sweep_command(lay)).splitlines() if ln.startswith("@@swept ")]
    assert sorted(swept) == ["current.mur-tmp", "releases/2/mur.mur-tmp-1a2b"]
    assert os.readlink(lay.current) == "releases/1" and (root / "releases" / "2" / "keep.txt").exists()
    assert not parse_observation(sh(observe_command(lay, None)), lay).tmp
