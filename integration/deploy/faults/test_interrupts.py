"""The operator's side dies or gives up at a seeded random point: `kill -9` of mur, one Ctrl-C and
two Ctrl-C typed on a terminal (a pty that is mur's controlling terminal: the kernel sends SIGINT
to the foreground job), and a Ctrl-C while the link is silent.

One Ctrl-C ends the command within a few seconds (CTRL_C_BOUND): it undoes what it can, else it
leaves an `incomplete` record that says what is left; the next deploy repairs; status never lies;
rollback finds the previous release from what is on the target."""

from __future__ import annotations

import re
import threading
import time

import pytest

from fault_harness import (
    CTRL_C_BOUND, SILENT_BOUND, Lane, Seed, check_truthful, no_traceback, scenario, truth,
)
from mur.testing.relay import UP

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]

# Where a redeploy can be interrupted (its progress lines), and how long after each line.
REDEPLOY_POINTS = [r"· connect", r"· preflight", r"· upload release", r"· smoke-start", r"· (switch to|start) release",
                   r"✓ start release"]
FIRST_DEPLOY_POINTS = [r"· preflight", r"upload runtime", r"· upload release 1", r"· start release 1",
                       r"✓ start release 1"]


def interrupted_deploy(lane: Lane, s: Seed, points: list[str], how: str, *, tty: bool = False,
                       extra: tuple[str, ...] = ()):
    """Deploy a new greeting and interrupt it (`kill9`, `ctrl_c`, `ctrl_c2`) a random moment after
    one of `points`. Returns (run, rc, greeting)."""
    point = s.pick(points)
    delay = s.rng.uniform(0, 1.2)
    greeting = lane.next_greeting()
    run = lane.op.spawn(*lane.deploy_args(greeting, *extra), tty=tty)
    second = s.rng.uniform(0.1, 1.0)

    def interrupt() -> None:
        if how == "kill9":
            run.kill9()
        else:
            run.ctrl_c()
            if how == "ctrl_c2":
                time.sleep(second)
                run.ctrl_c()

    run.on(point, interrupt, delay=delay)
    lane.notes.append(f"{how} {delay:.2f}s after {point!r}" + (f", again {second:.2f}s later" if how == "ctrl_c2" else "")
                      + f"; new greeting {greeting}")
    rc = run.finish(timeout=SILENT_BOUND + 120)
    return run, rc, greeting


def check_interrupted(run, rc: int) -> bool:  # noqa: ANN001
    """A Ctrl-C'd command: exit 130 within CTRL_C_BOUND of the first ^C, says it was interrupted,
    no traceback (or it had already finished: exit 0). True when it was interrupted."""
    text = run.stderr
    no_traceback(text)
    if rc == 0:
        return False
    assert rc == 130, f"exit {rc} after Ctrl-C, wanted 130:\n{text[-3000:]}"
    assert run.since_signal <= CTRL_C_BOUND, \
        f"Ctrl-C took {run.since_signal:.1f}s to end the command (bound {CTRL_C_BOUND:.0f}s):\n{text[-3000:]}"
    assert re.search(r"interrupt", text, re.I), f"nothing says it was interrupted:\n{text[-2000:]}"
    return True


def after_interrupt(lane: Lane, run, old: str, new: str) -> None:  # noqa: ANN001
    """What is true after an interrupted redeploy: the record is running on a release that serves
    (old or new), or `incomplete` saying what is left and that the next deploy repairs it."""
    t = check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
    if t.record.get("status") == "running":
        assert t.serving in (old, new), t.describe()
    elif t.record.get("status") == "incomplete" and run is not None and run.proc.returncode == 130:
        assert re.search(r"incomplete", run.stderr) and re.search(r"mur deploy", run.stderr), \
            f"an interrupted deploy left an incomplete record without saying so:\n{run.stderr[-2000:]}"


@scenario(cost=40)
def test_kill_9_at_random_points_of_a_redeploy(lane: Lane, s: Seed) -> None:
    old = lane.greeting
    old_n = truth(lane.box, lane.op, lane.dep).current  # type: ignore[arg-type]
    run, rc, greeting = interrupted_deploy(lane, s, REDEPLOY_POINTS, "kill9")
    assert rc in (0, -9), f"exit {rc}"
    after_interrupt(lane, None, old, greeting)  # type: ignore[arg-type]
    lane.repair(greeting)
    # rollback finds the previous release on the target, whatever the killed deploy recorded
    back = lane.op.json("deploy", "rollback", lane.dep)  # type: ignore[arg-type]
    assert back["release"] == old_n, back
    lane.greeting = old
    lane.check(expect=old)


@scenario(shared=False, serving=False, cost=35, seeds=1)
def test_kill_9_at_random_points_of_a_first_deploy(lane: Lane, s: Seed) -> None:
    run, rc, greeting = interrupted_deploy(lane, s, FIRST_DEPLOY_POINTS, "kill9")
    assert rc in (0, -9), f"exit {rc}"
    for rec in lane.op.records():
        check_truthful(lane.box, lane.op, rec["deployment_id"])
    lane.repair(greeting)


@scenario(cost=25)
def test_one_ctrl_c_on_a_terminal(lane: Lane, s: Seed) -> None:
    old = lane.greeting
    run, rc, greeting = interrupted_deploy(lane, s, REDEPLOY_POINTS, "ctrl_c", tty=True)
    if check_interrupted(run, rc):
        # one Ctrl-C on a healthy link: the undo completes, the previous release serves
        t = lane.check()
        assert t.serving in (old, greeting), t.describe()
    lane.repair(greeting)


@scenario(cost=25, seeds=1)
def test_two_ctrl_c_on_a_terminal(lane: Lane, s: Seed) -> None:
    old = lane.greeting
    run, rc, greeting = interrupted_deploy(lane, s, REDEPLOY_POINTS, "ctrl_c2", tty=True)
    if check_interrupted(run, rc):
        after_interrupt(lane, run, old, greeting)  # type: ignore[arg-type]
    lane.repair(greeting)


@scenario(shared=False, serving=False, cost=35, seeds=1)
def test_one_ctrl_c_on_a_first_deploy(lane: Lane, s: Seed) -> None:
    run, rc, greeting = interrupted_deploy(lane, s, FIRST_DEPLOY_POINTS, "ctrl_c", tty=True)
    if check_interrupted(run, rc):
        records = lane.op.records()
        # the undo of a first deploy on a healthy link leaves nothing at all
        assert records == [], f"an interrupted first deploy left records: {records}"
        assert not [p for p in lane.box.mur_procs() if "supervise" in p or " run " in p], lane.box.mur_procs()
        assert not lane.box.out(f"ls -A {lane.box.home}/.murmur/deployments 2>/dev/null").strip()
    lane.repair(greeting)


@scenario(cost=30)
def test_ctrl_c_while_the_link_is_silent(lane: Lane, s: Seed) -> None:
    """The issue's hang: one Ctrl-C during an upload (or a remote command) on a silent link must end
    the command within a few seconds (no wait in SFTPFile.close on a dead channel)."""
    old = lane.greeting
    stage = s.pick(["upload", "smoke", "start"])
    greeting = lane.next_greeting()
    extra: tuple[str, ...] = ()
    relay = lane.box.relay
    if stage == "upload":
        seed_dir, size = lane.seed_dir(s.rng)
        extra = ("--workdir", str(seed_dir))
    run = lane.op.spawn(*lane.deploy_args(greeting, *extra), tty=True)
    wait = s.rng.uniform(0.3, 2.0)

    def silent_then_ctrl_c(*_: object) -> None:
        relay.blackhole()
        threading.Timer(wait, run.ctrl_c).start()

    if stage == "upload":
        run.on(r"· upload release", lambda: relay.arm(s.rng.randrange(1, size), UP, silent_then_ctrl_c))
    else:
        run.on(r"· smoke-start" if stage == "smoke" else r"· start release", silent_then_ctrl_c,
               delay=s.rng.uniform(0, 1.0))
    lane.notes.append(f"blackhole during {stage}, Ctrl-C {wait:.2f}s later; new greeting {greeting}")
    rc = run.finish(timeout=SILENT_BOUND + 120)
    relay.disarm()
    relay.pass_through()
    if check_interrupted(run, rc):
        t = check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
        if stage != "start":
            assert t.serving == old, f"the previous release stopped serving: {t.describe()}"
    lane.repair(greeting)


