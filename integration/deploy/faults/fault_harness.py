"""The deploy fault suite's scenarios and how they run: seeds, lanes (a target + an operator), and
one scheduler that works through every selected scenario's seeds on a few targets at once.

    @scenario(seeds=2)                          # registers it; pytest sees test_x(faults)
    def test_x(lane: Lane, s: Seed) -> None:    # one seed: fault something, check what is true
        run = lane.op.spawn(*lane.deploy_args(lane.next_greeting()))
        run.on(r"· start release", lambda: lane.box.relay.blackhole())
        ...

Scenarios are mostly waiting (deadlines, restarts, remote starts), so the seeds of *all* selected
scenarios share LANES workers, each with its own serving target (`shared` scenarios, the default)
or a fresh one per seed (`shared=False`: first deploys, special targets). A test then only waits
for its own scenario's seeds. A failed seed is reported with its seed, its commands' output and
the relay's events; its worker continues on a fresh target.

Knobs (environment): MUR_FAULTS_SOAK=1 (4x the seeds), MUR_FAULTS_SEEDS=N (exactly N per
scenario), MUR_FAULTS_LANES (workers, default 3), MUR_FAULTS_SEED (shifts every seed: another
set of random points), MUR_FAULTS_VERBOSE=1|FILE (every command's timing).
"""

from __future__ import annotations

import queue
import random
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fault_checks import (  # noqa: F401 - the scenarios' vocabulary, in one import
    FAULTS, Truth, check_consistent, check_nothing_left, check_truthful, expect_failure, inject, names_the_step,
    no_traceback, staging_leftovers, truth,
)
from fault_target import (  # noqa: F401
    CTRL_C_BOUND, LANES, LOCK_ERROR, SEED_BASE, SEEDS, SILENT_BOUND, SOAK, VERBOSE, Box, Operator, Run, say, take_findings,
)


@dataclass
class Seed:
    seed: int
    index: int  # position among the scenario's seeds (fault kinds cycle with it)
    rng: random.Random

    def pick(self, options: list | tuple):
        """Cycle through `options` with the seed's index (every option runs once the seeds are enough)."""
        return options[self.index % len(options)]


@dataclass
class Lane:
    """One target and one operator; `dep` and `greeting` are the deployment and what it serves."""

    number: int
    box: Box
    op: Operator
    manifest: str
    workdir: Path
    dep: str | None = None
    greeting: str | None = None
    configs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # greeting -> its other deploy options
    counter: int = 0
    notes: list[str] = field(default_factory=list)
    verified: bool = False  # the last check found `greeting` serving, consistent, and nothing ran since

    @property
    def extra(self) -> tuple[str, ...]:
        """The other deploy options of what serves: deployed again with them, it is unchanged."""
        return self.configs.get(self.greeting or "", ())

    def operator(self, home: Path, env: dict[str, str] | None = None) -> Operator:
        """Another operator working on this lane's target, picking ports in the lane's range."""
        return Operator(home, {**lane_ports(self.number), **(env or {})})

    def next_greeting(self) -> str:
        self.counter += 1
        return f"g{self.number}x{self.counter}"

    def deploy_args(self, greeting: str, *extra: str, direct: bool = False) -> list[str]:
        return ["deploy", "-m", self.manifest, *self.box.args(direct=direct), "--env", f"HELLO_GREETING={greeting}",
                *extra, "--json"]

    def seed_dir(self, rng: random.Random, mib: tuple[float, float] = (2, 5)) -> tuple[Path, int]:
        """A fresh workdir seed (--workdir) of random content: a redeploy that uploads megabytes."""
        d = self.workdir / f"seed-{self.counter}-{rng.randrange(1 << 30)}"
        d.mkdir(parents=True)
        size = int(rng.uniform(*mib) * (1 << 20))
        (d / "blob.bin").write_bytes(rng.randbytes(size))
        return d, size

    def deploy(self, greeting: str | None = None, *extra: str) -> dict:
        """A plain deploy through a healthy link; it must succeed (the caller checks what serves)."""
        self.box.relay.pass_through()
        self.verified = False
        greeting = greeting or self.next_greeting()
        res = self.op.json(*self.deploy_args(greeting, *extra)[:-1])
        self.dep, self.greeting = res["deployment_id"], greeting  # type: ignore[index]
        self.configs[greeting] = tuple(extra)
        return res  # type: ignore[return-value]

    def check(self, expect: str | None = None, **kw: Any) -> Truth:
        """check_consistent for this lane's deployment (`expect`: the greeting that must serve)."""
        self.verified = False
        t = check_consistent(self.box, self.op, self.dep, expect=expect, **kw)  # type: ignore[arg-type]
        self.verified = expect is not None and expect == self.greeting
        return t

    def repair(self, greeting: str | None = None) -> Truth:
        """After a fault, with the link back: the next deploy must succeed and leave everything
        consistent, whatever the fault left behind."""
        greeting = greeting or self.greeting or self.next_greeting()
        self.deploy(greeting)
        return self.check(greeting)

    def destroy_all(self) -> None:
        self.box.relay.pass_through()
        for rec in self.op.records():
            self.op.mur("deploy", "destroy", rec["deployment_id"])
        check_nothing_left(self.box)


def lane_ports(number: int, width: int = 250) -> dict[str, str]:
    """Each lane's derived service ports in a range of their own: the targets are containers on the
    host network, so a port one lane's deploy checked free could be taken by another lane's smoke
    start before it starts (a CI flake: E-DEPLOY-004 "port taken"); distinct hosts never share them."""
    lo = 20000 + ((number - 1) % 50) * width
    return {"MUR_DEPLOY_PORTS": f"{lo}-{lo + width - 1}"}


class LanePool:
    """Makes lanes (a target behind a relay, a clean HOME), and keeps the serving ones the workers
    hand back; at the end every kept lane is destroyed and checked for leftovers."""

    def __init__(self, image: str, manifest: Path, tmp: Path):
        self.image, self.manifest, self.tmp = image, manifest, tmp
        self.idle: list[Lane] = []
        self.made = 0
        self._lock = threading.Lock()

    def fresh(self, *, user: str = "root", home_size: str | None = None, serving: bool = True) -> Lane:
        with self._lock:
            self.made += 1
            number = self.made
        wd = self.tmp / f"lane{number}"
        box = Box.start(self.image, wd / "sshd", user=user, home_size=home_size)
        lane = Lane(number, box, Operator(wd / "home", lane_ports(number)), str(self.manifest), wd)
        if home_size:
            lane.notes.append(f"the deploy user's home is a {home_size} filesystem")
        if serving:
            try:
                lane.deploy()
            except BaseException:
                box.close()
                raise
        return lane

    def give(self, lane: Lane) -> None:
        with self._lock:
            self.idle.append(lane)

    def close(self) -> list[str]:
        failures: list[str] = []

        def end(lane: Lane) -> None:
            try:
                lane.destroy_all()
            except BaseException as exc:  # noqa: BLE001
                failures.append(report("destroy at the end of the session", lane.number, lane, exc))
            finally:
                close_quietly(lane)

        threads = [threading.Thread(target=end, args=(lane,)) for lane in self.idle]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.idle.clear()
        return failures


# --- scenarios and the scheduler ------------------------------------------------------------------


@dataclass
class Spec:
    name: str
    fn: Callable[[Lane, Seed], None]
    shared: bool = True  # on a worker's serving target; else a fresh target per seed
    serving: bool = True  # a fresh target: with a first deploy done
    seeds: int = 2
    user: str = "root"
    home_size: str | tuple[str, ...] | None = None  # a tuple: one size per seed, in turn
    cost: float = 30.0  # rough seconds per seed (the longest start first)

    def seed_list(self) -> list[int]:
        count = SEEDS or self.seeds * (4 if SOAK else 1)
        base = sum(map(ord, self.name)) * 1000 + SEED_BASE  # stable per scenario: reproducible
        return [base + i for i in range(count)]


REGISTRY: dict[str, Spec] = {}
SELECTED: list[str] = []  # what pytest collected (conftest sets it): only these run


def scenario(**opts: Any) -> Callable[[Callable[[Lane, Seed], None]], Callable[..., None]]:
    """Register a scenario; what pytest collects in its place waits for its seeds' outcome."""
    def register(fn: Callable[[Lane, Seed], None]) -> Callable[..., None]:
        spec = Spec(fn.__name__, fn, **opts)
        REGISTRY[spec.name] = spec

        def test(faults: "Scheduler") -> None:
            faults.result(spec.name)

        test.__name__, test.__qualname__, test.__doc__, test.__module__ = (
            fn.__name__, fn.__qualname__, fn.__doc__, fn.__module__)
        test.fault_scenario = spec.name  # type: ignore[attr-defined]
        return test

    return register


@dataclass
class Outcome:
    total: int
    done: int = 0
    failures: list[str] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    seconds: float = 0.0


class Scheduler:
    """Works through the seeds of the selected scenarios with `workers` threads."""

    def __init__(self, pool: LanePool, names: list[str], workers: int = LANES):
        self.pool = pool
        self.outcomes: dict[str, Outcome] = {}
        self.jobs: queue.Queue[tuple[Spec, int, int]] = queue.Queue()
        specs = sorted((REGISTRY[n] for n in dict.fromkeys(names) if n in REGISTRY), key=lambda sp: -sp.cost)
        for spec in specs:
            seeds = spec.seed_list()
            self.outcomes[spec.name] = Outcome(len(seeds))
            for index, seed in enumerate(seeds):
                self.jobs.put((spec, index, seed))
        self.stopping = False
        self.threads = [threading.Thread(target=self._work, args=(i,), name=f"fault-lane-{i}", daemon=True)
                        for i in range(max(1, workers))]
        for t in self.threads:
            t.start()

    def result(self, name: str) -> None:
        out = self.outcomes.get(name)
        if out is None:
            raise AssertionError(f"scenario {name} was not scheduled (not collected?)")
        out.finished.wait()
        if VERBOSE:
            say(f"== {name}: {out.total} seed(s), {out.seconds:.0f}s of lane time, {len(out.failures)} failed")
        if out.failures:
            raise AssertionError(f"{len(out.failures)} of {out.total} seed(s) of {name} failed (another set of "
                                 f"random points: MUR_FAULTS_SEED=N):\n\n" + "\n\n".join(out.failures))

    def stop(self) -> None:
        """No new seeds; those running finish (every command has a deadline)."""
        self.stopping = True
        for t in self.threads:
            t.join()
        for out in self.outcomes.values():
            out.finished.set()

    def _work(self, number: int) -> None:
        lane: Lane | None = None  # this worker's serving target, for the shared scenarios
        while not self.stopping:
            try:
                spec, index, seed = self.jobs.get_nowait()
            except queue.Empty:
                break
            out = self.outcomes[spec.name]
            use: Lane | None = None
            t0 = time.monotonic()
            try:
                if spec.shared:
                    lane = lane or self.pool.fresh()
                    use = lane
                else:
                    size = spec.home_size[index % len(spec.home_size)] if isinstance(spec.home_size, tuple) \
                        else spec.home_size
                    use = self.pool.fresh(user=spec.user, home_size=size, serving=spec.serving)
                use.notes.append(f"{spec.name} seed {seed}")
                use.verified = False
                take_findings()
                spec.fn(use, Seed(seed, index, random.Random(seed)))
                found = take_findings()
                use.box.relay.pass_through()
                use.box.relay.disarm()
                if spec.shared:  # it goes on to the next scenario: it must be whole
                    if not use.verified:
                        use.check(use.greeting)
                else:
                    use.destroy_all()
                    use.box.close()
                if found:  # lesser findings: the target stays in use
                    out.failures.append(report(spec.name, seed, use, AssertionError(
                        "the scenario's checks passed, but: " + "; ".join(dict.fromkeys(found)))))
            except BaseException as exc:  # noqa: BLE001 - reported with its seed
                out.failures.append(report(spec.name, seed, use, exc))
                if use is not None:
                    close_quietly(use)
                if use is lane:
                    lane = None
            finally:
                out.seconds += time.monotonic() - t0
                out.done += 1
                if out.done == out.total:
                    out.finished.set()
        if lane is not None:
            self.pool.give(lane)


def close_quietly(lane: Lane) -> None:
    """Remove a lane's target after a failure (it may be half gone already)."""
    try:
        lane.box.close()
    except Exception:  # noqa: BLE001 - the container may be gone; nothing else to do
        pass


def report(name: str, seed: Any, lane: Lane | None, exc: BaseException) -> str:
    lines = [f"--- {name} seed {seed}: {type(exc).__name__}: {str(exc)[:3000]}"]
    if not isinstance(exc, AssertionError):
        lines.append("".join(traceback.format_exception(exc))[-2000:])
    if lane is not None:
        lines += [f"  note: {n}" for n in lane.notes[-6:]]
        lines.append("  commands:\n" + "\n".join("    " + ln for c in lane.op.log[-4:] for ln in c.splitlines()))
        lines.append(f"  relay: {lane.box.relay.describe(12)}")
    return "\n".join(lines)
