"""What is true on a host, read from one command's output, and the state derived from it: the
serving release comes from the process on the port, never from the record."""

from __future__ import annotations

import json

import pytest

from mur.deploy.deadlines import Deadlines
from mur.deploy.observe import derive, parse_observation, release_of
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
