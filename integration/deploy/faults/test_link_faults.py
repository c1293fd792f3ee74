"""The link between the operator and the target fails at a seeded random point of each deploy step:
cut (FIN), reset (RST), dropped for a moment (the undo must reconnect), or silent (blackhole: the
deploy must give up within the documented deadline, E-DEPLOY-003 naming the step).

Each scenario then checks what is true: the command failed cleanly, `status` does not lie, the
previous release still serves where it should, and the next deploy through a healthy link
repairs everything (record == current == what serves, nothing half-written left)."""

from __future__ import annotations

import threading
import time

import pytest

from fault_harness import (
    FAULTS, SILENT_BOUND, Lane, Seed, check_truthful, expect_failure, inject, names_the_step,
    scenario, staging_leftovers, truth,
)
from mur.testing.relay import UP

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]


def faulted_deploy(lane: Lane, s: Seed, marker: str, *, offset: int | None = None, delay: float | None = None,
                   extra: tuple[str, ...] = (), greeting: str | None = None):
    """Deploy a new greeting; when `marker` shows in its progress, break the link after `offset`
    more bytes up (or `delay` seconds). Returns (run, rc, kind, greeting)."""
    kind = s.pick(FAULTS)
    greeting = greeting or lane.next_greeting()
    run = lane.op.spawn(*lane.deploy_args(greeting, *extra))
    act = inject(lane.box.relay, kind, s.rng)

    def fire(relay) -> None:  # noqa: ANN001
        run.signalled_at = time.monotonic()
        act(relay)

    relay = lane.box.relay
    if offset is not None:
        run.on(marker, lambda: relay.arm(offset, UP, fire, name=f"{kind} after {offset} bytes up"))
    else:
        run.on(marker, lambda: relay.act(fire), delay=delay or 0.0)
    lane.notes.append(f"{kind} at {marker!r} + {offset if offset is not None else f'{delay:.2f}s'}; new greeting {greeting}")
    rc = run.finish(timeout=SILENT_BOUND + 120)
    relay.disarm()
    relay.pass_through()
    return run, rc, kind, greeting


@scenario(shared=False, serving=False, cost=40)
def test_link_fault_during_the_runtime_upload(lane: Lane, s: Seed) -> None:
    """A first deploy whose runtime upload (46 MiB) breaks: a clean error; the retry sweeps the
    partial runtime and deploys; destroy leaves nothing."""
    run, rc, kind, greeting = faulted_deploy(lane, s, r"upload runtime", offset=s.rng.randrange(1, 40 << 20))
    assert run.seen(r"upload runtime"), "the runtime was not uploaded: the scenario needs a clean target"
    expect_failure(run, rc, bound=SILENT_BOUND)
    if kind == "blackhole":
        names_the_step(run, ["runtime", "upload", "preflight"])
    lane.repair(greeting)


@scenario(shared=False, serving=False, cost=40)
def test_link_fault_during_a_first_release_upload(lane: Lane, s: Seed) -> None:
    """A first deploy whose release upload (~110 MB) breaks: nothing is left, or an `incomplete`
    record the next deploy repairs; destroy then leaves nothing."""
    run, rc, kind, greeting = faulted_deploy(lane, s, r"· upload release 1", offset=s.rng.randrange(1, 100_000_000))
    expect_failure(run, rc, bound=SILENT_BOUND)
    if kind == "blackhole":
        names_the_step(run, ["upload"])
    records = lane.op.records()
    if kind != "blackhole":  # the link came back: the undo ran, a first deploy leaves nothing
        assert records == [], f"the undo of a first deploy left a record: {records}"
    for rec in records:
        assert rec["status"] == "incomplete", rec
        check_truthful(lane.box, lane.op, rec["deployment_id"])
    lane.repair(greeting)


def _old_keeps_serving(lane: Lane, kind: str, old: str) -> None:
    """After a failed redeploy that never switched: the previous release serves; when the link came
    back before the command gave up, the undo finished (record running on it, nothing half left)."""
    if kind == "blackhole":
        t = check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
        assert t.serving == old, f"the previous release stopped serving: {t.describe()}"
    else:
        lane.check(expect=old)


@scenario(cost=30)
def test_link_fault_during_a_redeploy_upload(lane: Lane, s: Seed) -> None:
    old = lane.greeting
    seed_dir, size = lane.seed_dir(s.rng)
    run, rc, kind, greeting = faulted_deploy(lane, s, r"· upload release", offset=s.rng.randrange(1, size),
                                             extra=("--workdir", str(seed_dir)))
    expect_failure(run, rc, bound=SILENT_BOUND)
    if kind == "blackhole":
        names_the_step(run, ["upload"])
    _old_keeps_serving(lane, kind, old)  # type: ignore[arg-type]
    lane.deploy(greeting, "--workdir", str(seed_dir))
    lane.check(expect=greeting)


@scenario(cost=25)
def test_link_fault_during_the_smoke_start(lane: Lane, s: Seed) -> None:
    old = lane.greeting
    run, rc, kind, greeting = faulted_deploy(lane, s, r"· smoke-start", delay=s.rng.uniform(0, 1.5))
    if not expect_failure(run, rc, bound=SILENT_BOUND, allow_success=True):
        lane.greeting = greeting
        lane.check(expect=greeting)
        return
    if kind == "blackhole":  # a delay past a fast smoke start lands the fault on the next step, the switch
        names_the_step(run, ["smoke", "start", "switch"])
    if run.seen(r"· start release"):
        # the delay outlasted the smoke start: the fault hit the switch and restart, where what holds
        # is test_link_fault_during_the_start's (status tells the truth; the next deploy repairs)
        check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
    else:
        _old_keeps_serving(lane, kind, old)  # type: ignore[arg-type]
    assert not [p for p in lane.box.mur_procs() if "smoke" in p] or kind == "blackhole", lane.box.mur_procs()
    lane.repair(greeting)
    assert not [p for p in lane.box.mur_procs() if "smoke" in p], lane.box.mur_procs()


def watch(lane: Lane, waiting: str, action) -> threading.Thread:  # noqa: ANN001
    """A thread that runs `action` the moment the shell condition `waiting` stops holding on the
    target (a busy loop in the container, no sleep between the reads: the step after the watched
    one follows within milliseconds); bounded to 120 s in case the deploy never gets there."""
    cmd = (f"end=$(($(date +%s) + 120)); i=0; while {waiting}; do "
           f"i=$((i+1)); if [ $((i % 200)) = 0 ] && [ $(date +%s) -gt $end ]; then exit 0; fi; done; echo fired")

    def run() -> None:
        res = lane.box.vm.container.exec_run(["/bin/sh", "-c", cmd], stream=True)
        for chunk in res.output:
            if b"fired" in chunk:
                action()
                return

    return threading.Thread(target=run, daemon=True)


def fault_when(lane: Lane, s: Seed, waiting: str, what: str):  # noqa: ANN201
    """Deploy a new greeting and break the link (the seed's kind) the moment the shell condition
    `waiting` stops holding on the target; returns (run, rc, greeting) once the deploy ended."""
    kind = s.pick(FAULTS)
    greeting = lane.next_greeting()
    run = lane.op.spawn(*lane.deploy_args(greeting))
    act = inject(lane.box.relay, kind, s.rng)

    def fire() -> None:
        run.signalled_at = time.monotonic()
        lane.box.relay.act(act)

    watcher = watch(lane, waiting, fire)
    run.on(r"· (smoke-start|switch to|start) release", watcher.start)  # watching before the step
    lane.notes.append(f"{kind} {what}; new greeting {greeting}")
    rc = run.finish(timeout=SILENT_BOUND + 120)
    lane.box.relay.pass_through()
    assert run.signalled_at is not None, f"{what}: never seen (exit {rc}):\n{run.stderr[-2000:]}"
    return run, rc, greeting


@scenario(cost=45)
def test_link_fault_right_after_the_switch(lane: Lane, s: Seed) -> None:
    """The issue's first finding: the link breaks just after `current` was switched, before the
    service restarts. Nothing may then say `unchanged` while the old release serves: status tells
    the truth, the next deploy serves what it was asked to, and rollback finds the previous release.
    The switch and the restart are one remote command now: once the switch went out, the restart
    runs too, so `current` names the release that serves (the new one, or the old one where the undo
    got through), never `diverged` (it was, when the restart was the next command)."""
    old = lane.greeting
    old_n = truth(lane.box, lane.op, lane.dep).current  # type: ignore[arg-type]
    root = lane.box.dep_root(lane.dep)  # type: ignore[arg-type]
    # the switch is one `mv`, the restart the rest of the same command
    run, rc, greeting = fault_when(lane, s, f"[ \"$(readlink {root}/current)\" = releases/{old_n} ]",
                                   "right after the switch")
    if expect_failure(run, rc, bound=SILENT_BOUND, allow_success=True, codes=("E-DEPLOY-003", "E-DEPLOY-004")):
        t = check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
        deadline = time.monotonic() + 30  # a restart the lost link left running may still be starting
        while (t.current is None or t.serving != t.releases.get(t.current, {}).get("greeting")) \
                and time.monotonic() < deadline:
            time.sleep(1)
            t = truth(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
        assert t.record.get("status") != "diverged" and t.current is not None \
            and t.serving == t.releases[t.current]["greeting"], f"current is not what serves\n  {t.describe()}"
    res = lane.deploy(greeting)
    assert not (res["unchanged"] and truth(lane.box, lane.op, lane.dep).serving != greeting)  # type: ignore[arg-type]
    lane.check(expect=greeting)
    back = lane.op.json("deploy", "rollback", lane.dep)  # type: ignore[arg-type]
    assert back["release"] == old_n, back
    lane.greeting = old
    lane.check(expect=old)


@scenario(cost=35)
def test_link_fault_during_the_start(lane: Lane, s: Seed) -> None:
    """Anywhere in the start step (switch, restart, the wait for the agent card)."""
    run, rc, kind, greeting = faulted_deploy(lane, s, r"· start release", delay=s.rng.uniform(0, 2.5))
    if expect_failure(run, rc, bound=SILENT_BOUND, allow_success=True, codes=("E-DEPLOY-003", "E-DEPLOY-004")):
        if kind == "blackhole":
            names_the_step(run, ["start", "switch"])
        check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
    lane.repair(greeting)
    assert staging_leftovers(lane.box) == []


@scenario(cost=45)
def test_link_fault_as_the_service_restarts(lane: Lane, s: Seed) -> None:
    """The link breaks the moment the serving supervisor is gone, before its successor starts. The
    restart was two commands once (stop, then start): a link lost between them left nothing serving
    until the next deploy. Once sent, the restart runs to its end on the target, so a release
    serves without any repair: the new one, or the previous one where the undo got through, and
    status says which."""
    old = lane.greeting
    pidfile = f"{lane.box.dep_root(lane.dep)}/run/supervisor.pid"  # type: ignore[arg-type]
    was = lane.box.out(f"cat {pidfile}").strip()
    assert was, "no supervisor recorded before the redeploy"
    run, rc, greeting = fault_when(lane, s, f"[ \"$(cat {pidfile} 2>/dev/null)\" = '{was}' ]",
                                   "as the old supervisor goes")
    if expect_failure(run, rc, bound=SILENT_BOUND, allow_success=True, codes=("E-DEPLOY-003", "E-DEPLOY-004")):
        t = check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
        deadline = time.monotonic() + 60
        while t.serving is None and time.monotonic() < deadline:  # the new supervisor may still be starting it
            time.sleep(2)
            t = truth(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
        assert t.serving in (old, greeting), f"nothing serves after a fault in the restart\n  {t.describe()}"
    lane.repair(greeting)
