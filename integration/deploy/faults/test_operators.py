"""Two operators at once: one deploy at a time per deployment, held on the target.

The second command waits up to `--lock-wait` (default: not at all) and then fails with its own
error naming the holder (its pid among the holder's identity); a holder that died must not block
forever; two *different* deployments of one capsule on one target do not disturb each other
(shared runtime, artifacts and compile cache), and destroying one leaves the other serving."""

from __future__ import annotations

import re
import shutil
import time

import pytest

from fault_harness import (
    LOCK_ERROR, Lane, Operator, Seed, check_consistent, check_nothing_left, check_truthful, no_traceback, scenario,
)

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]

HOLDING_POINTS = [r"· preflight", r"· upload release", r"· smoke-start", r"· start release"]


def second_operator(lane: Lane, name: str) -> Operator:
    """Another operator who shares the first one's records (a copy of ~/.murmur: records, keys)."""
    other = lane.operator(lane.workdir / f"home-{name}-{time.monotonic_ns()}")
    shutil.copytree(lane.op.home / ".murmur", other.home / ".murmur", dirs_exist_ok=True)
    return other


def names_holder(text: str, holder_pid: int) -> None:
    assert LOCK_ERROR.search(text), f"no lock error:\n{text[-2000:]}"
    assert re.search(rf"\b{holder_pid}\b", text), f"the lock error does not name the holder (pid {holder_pid}):\n{text[-2000:]}"


def race(lane: Lane, s: Seed, second: Operator, *, lock_wait: str | None = None):
    """A deploys a new greeting; B (operator `second`) deploys another once A's progress shows a
    seeded step (with --lock-wait: a step where A surely holds the lock).
    Returns (run_a, rc_a, g_a, run_b, rc_b, g_b)."""
    g_a, g_b = lane.next_greeting(), lane.next_greeting()
    point = s.pick(HOLDING_POINTS[1:] if lock_wait else HOLDING_POINTS)
    run_a = lane.op.spawn(*lane.deploy_args(g_a))
    runs = {}
    extra = ("--lock-wait", lock_wait) if lock_wait else ()
    run_a.on(point, lambda: runs.setdefault("b", second.spawn(*lane.deploy_args(g_b, *extra))),
             delay=s.rng.uniform(0, 0.5))
    lane.notes.append(f"B starts at {point!r} of A (A {g_a}, B {g_b}, lock-wait {lock_wait})")
    rc_a = run_a.finish(timeout=300)
    assert "b" in runs, f"A ended before {point!r}:\n{run_a.stderr[-2000:]}"
    run_b = runs["b"]
    rc_b = run_b.finish(timeout=300)
    no_traceback(run_a.stderr)
    no_traceback(run_b.stderr)
    return run_a, rc_a, g_a, run_b, rc_b, g_b


@scenario(cost=25)
def test_two_deploys_of_one_deployment_from_one_home(lane: Lane, s: Seed) -> None:
    run_a, rc_a, g_a, run_b, rc_b, g_b = race(lane, s, lane.op)
    assert sorted([rc_a, rc_b]) == [0, 1], f"A exit {rc_a}, B exit {rc_b}:\nA:\n{run_a.stderr[-1500:]}\nB:\n{run_b.stderr[-1500:]}"
    winner, loser, g_win = (run_a, run_b, g_a) if rc_a == 0 else (run_b, run_a, g_b)
    names_holder(loser.stderr, winner.pid)
    lane.greeting = g_win
    lane.check(expect=g_win)


@scenario(cost=30, seeds=1)
def test_lock_wait_lets_the_second_deploy_follow(lane: Lane, s: Seed) -> None:
    run_a, rc_a, g_a, run_b, rc_b, g_b = race(lane, s, lane.op, lock_wait="240")
    assert rc_a == 0 and rc_b == 0, f"A exit {rc_a}, B exit {rc_b}:\nA:\n{run_a.stderr[-1500:]}\nB:\n{run_b.stderr[-1500:]}"
    first_done = min((run_a, g_a), (run_b, g_b), key=lambda x: x[0].ended_at)
    last = g_b if first_done[1] == g_a else g_a
    lane.greeting = last
    lane.check(expect=last)


@scenario(cost=35, seeds=1)
def test_two_operators_with_their_own_homes_deploy_one_deployment(lane: Lane, s: Seed) -> None:
    """B's HOME holds a copy of A's records (one deployment, two machines): the target's lock is
    what keeps them apart; afterwards both operators' status tells the truth."""
    other = second_operator(lane, "b")
    run_a, rc_a, g_a, run_b, rc_b, g_b = race(lane, s, other)
    assert sorted([rc_a, rc_b]) == [0, 1], f"A exit {rc_a}, B exit {rc_b}:\nA:\n{run_a.stderr[-1500:]}\nB:\n{run_b.stderr[-1500:]}"
    winner, loser, g_win = (run_a, run_b, g_a) if rc_a == 0 else (run_b, run_a, g_b)
    names_holder(loser.stderr, winner.pid)
    # each operator's status tells the truth; the one whose copy of the record is stale may see
    # `diverged` (the "record vs current vs serving"), never a release that does not serve
    for op in (lane.op, other):
        t = check_truthful(lane.box, op, lane.dep)  # type: ignore[arg-type]
        assert t.serving == g_win and t.current is not None and t.releases[t.current]["greeting"] == g_win, t.describe()
        if t.record.get("status") == "diverged":
            lane.notes.append(f"a stale record's operator sees `diverged`: {t.describe()}")
    lane.repair(g_win)  # and the first operator's next deploy sets its record right


@scenario(cost=45)
def test_a_holder_that_died_does_not_block_forever(lane: Lane, s: Seed) -> None:
    """A holds the lock and dies (kill -9; on a link that went silent, so the target never hears
    of it, or on a healthy one): B, on another route, gets the lock within its --lock-wait."""
    silent = s.pick([True, False])
    other = second_operator(lane, "b")
    g_a, g_b = lane.next_greeting(), lane.next_greeting()
    run_a = lane.op.spawn(*lane.deploy_args(g_a))

    def die() -> None:
        if silent:
            lane.box.relay.blackhole()
        run_a.kill9()

    run_a.on(s.pick(HOLDING_POINTS[1:]), die, delay=s.rng.uniform(0, 0.5))
    lane.notes.append(f"A killed {'behind a silent link' if silent else 'on a healthy link'}; B {g_b} direct")
    run_a.finish(timeout=300)
    t0 = time.monotonic()
    res = other.mur(*lane.deploy_args(g_b, "--id", lane.dep, "--lock-wait", "90", direct=True),  # type: ignore[arg-type]
                    check=False, timeout=300)
    lane.box.relay.pass_through()
    assert res.returncode == 0, f"B could not deploy after A died ({time.monotonic() - t0:.0f}s):\n{res.stderr[-2500:]}"
    no_traceback(res.stderr)
    check_consistent(lane.box, other, lane.dep, expect=g_b)  # type: ignore[arg-type]
    check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
    lane.repair(g_b)


@scenario(shared=False, serving=False, seeds=1, cost=50)
def test_two_deployments_of_one_capsule_on_one_target_at_once(lane: Lane, s: Seed) -> None:
    """Two operators (own HOMEs, no shared records) deploy the same capsule to the same target at
    the same time: two deployments, both serve; destroying one leaves the other whole; destroying
    both leaves nothing."""
    other = lane.operator(lane.workdir / f"home-b-{time.monotonic_ns()}")
    g_a, g_b = lane.next_greeting(), lane.next_greeting()
    run_a = lane.op.spawn(*lane.deploy_args(g_a))
    runs = {}
    point = s.pick([r"· connect", r"· preflight", r"upload runtime", r"· upload release", r"· start release"])
    run_a.on(point, lambda: runs.setdefault("b", other.spawn(*lane.deploy_args(g_b))), delay=s.rng.uniform(0, 0.5))
    lane.notes.append(f"B starts at {point!r} of A")
    rc_a = run_a.finish(timeout=300)
    run_b = runs["b"]
    rc_b = run_b.finish(timeout=300)
    assert rc_a == 0 and rc_b == 0, f"A exit {rc_a}, B exit {rc_b}:\nA:\n{run_a.stderr[-1500:]}\nB:\n{run_b.stderr[-1500:]}"
    dep_a, dep_b = run_a.result()["deployment_id"], run_b.result()["deployment_id"]  # type: ignore[index]
    assert dep_a != dep_b
    check_consistent(lane.box, lane.op, dep_a, expect=g_a)
    check_consistent(lane.box, other, dep_b, expect=g_b)
    first, second = s.pick([((lane.op, dep_a), (other, dep_b, g_b)), ((other, dep_b), (lane.op, dep_a, g_a))])
    first[0].mur("deploy", "destroy", first[1])
    check_consistent(lane.box, second[0], second[1], expect=second[2])
    second[0].mur("deploy", "destroy", second[1])
    check_nothing_left(lane.box)
    lane.dep = None


