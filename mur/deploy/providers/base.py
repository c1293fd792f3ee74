"""The Provider protocol: one implementation per kind of target, one dispatch point.

    provider = provider_for(record.provider)         # mur.deploy.providers: "local" | "ssh" | "docker"
    report = provider.check(job)                     # preflight only (--check)
    dep = provider.deploy(job)                       # deploy or redeploy; returns the saved record
    provider.status(dep, ctx) / logs(...) / start / stop / destroy / rollback / gc(spec, ctx)

What is the same for every provider lives here, once: the deploy job, the runtime for the
target's platform, precompiled components, the service port, the record fields, the health wait.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from mur import __version__
from mur.deploy import auth
from mur.runtime.bundle import Bundle
from mur.deploy.apply import run_step
from mur.resolve.shipped import ShippedCapsule
from mur.deploy.deadlines import Deadlines, current as current_deadlines
from mur.deploy.preflight import Report
from mur.progress import QUIET, Reporter
from mur.deploy.request import DeployRequest
from mur.deploy.state import Deployment, DeploymentStore, now_rfc3339, uninterrupted
from mur.deploy.undo import Attempt, Phase
from mur.deploy.init import init_for
from mur.deploy.steps import BundleRef, FileRef, Layout, ServiceState, Tls
from mur.deploy.targets import TargetSpec, connect
from mur.deploy.targets.base import Target, full_line, quoted
from mur.errors import MurError


def resolve_runtime(req: DeployRequest, cap: ShippedCapsule, plat: str, note: Callable[[str], None]) -> Bundle:
    """The runtime for the capsule's pin (this mur's version when unpinned), for `plat`."""
    from mur.runtime import bundle

    pin = cap.mur_version or __version__
    if req.mur_binary:
        return bundle.use_explicit_bundle(req.mur_binary, pin)
    if req.target.provider == "local" and not req.use_bundle and pin == __version__:
        return bundle.installed_runtime()
    return bundle.resolve_bundle(pin, plat, req.release_source or cap.release_source, note)


def precompiled_components(req: DeployRequest, cap: ShippedCapsule, plat: str, reporter: Reporter) -> tuple[FileRef, ...]:
    """Components compiled here for the target's engine cache (this machine caches its own)."""
    from mur.runtime import precompile as pc

    if req.target.provider == "local" or not req.precompile:
        return ()
    why = pc.supported(plat)
    if why:
        reporter.note(f"components compile on the target at first start: {why}")
        return ()
    sources = cap.wasm_sources()
    if not sources:
        return ()
    with reporter.step(f"precompile {len(sources)} component(s) for {plat}"):
        return tuple(p.file for p in pc.precompile(sources, plat, reporter))


def _no_event(name: str, **fields: Any) -> None:
    pass


@dataclass
class Context:
    """What a provider is given instead of reaching for globals (tests inject their own)."""

    reporter: Reporter = QUIET
    store: DeploymentStore = field(default_factory=DeploymentStore)
    connect: Callable[..., Target] = connect
    runtime: Callable[[DeployRequest, ShippedCapsule, str, Callable[[str], None]], Bundle] = resolve_runtime
    precompile: Callable[[DeployRequest, ShippedCapsule, str, Reporter], tuple[FileRef, ...]] = precompiled_components
    timeout: float = 180.0
    lock_wait: float = 0.0  # --lock-wait: how long to wait for another command's lock on the deployment
    deadlines: Deadlines = field(default_factory=current_deadlines)
    # progress as machine-readable events (`MUR_DEPLOY_EVENTS`, for fault tests): name + fields
    event: Callable[..., None] = _no_event
    # what a new release must pass before it takes traffic (a fleet's smoke task; mur.deploy.fronted):
    # (target, port, token, pin) -> {"ok", "error"}; None: the authenticated health check
    gate: Callable[..., dict[str, Any]] | None = None

    def open(self, spec: TargetSpec, trust_new_host: bool = False) -> Target:
        with self.phase("connect", f"connect {spec.label}"):
            return self.connect(spec, trust_new_host=trust_new_host, note=self.reporter.note)

    @contextlib.contextmanager
    def phase(self, key: str, text: str, target: Target | None = None, **fields: Any) -> Iterator[None]:
        """A named step: reported (`text`), announced as an event (`key`: stable, for tests), and
        named by every link or disk error raised while it runs (`target.doing`)."""
        self.event("begin", step=key, text=text, **fields)
        before = target.doing if target is not None else ""
        if target is not None:
            target.doing = text
        try:
            with self.reporter.step(text):
                yield
        except BaseException as exc:
            self.event("fail", step=key, error=type(exc).__name__)
            raise
        finally:
            if target is not None:
                target.doing = before
        self.event("end", step=key)


@dataclass
class Outcome:
    """What a deploy did (the CLI's result object is built from it)."""

    deployment: Deployment
    unchanged: bool = False
    repaired: str | None = None  # what an otherwise unchanged deploy had to set right (restart, switch back)
    uploaded: int | None = None
    uploaded_bytes: int | None = None
    agent_card: dict[str, Any] | None = None


@dataclass
class DeployJob:
    req: DeployRequest
    capsule: ShippedCapsule
    dep_id: str
    existing: Deployment | None  # the record as it was before this command (None: a new deployment)
    ctx: Context
    created: bool = False  # this command reserved the record (a failure before any change forgets it)
    reservation: str = ""  # the token of that reservation (pending.token of the reserved record)


class Provider(Protocol):
    kind: str

    def check(self, job: DeployJob) -> Report:
        """Preflight only: what the target can enforce; changes nothing but the runtime cache."""

    def deploy(self, job: DeployJob) -> Outcome:
        """Deploy or redeploy; leaves nothing, or a saved record (`incomplete` when interrupted)."""

    def status(self, dep: Deployment, ctx: Context) -> dict[str, Any]:
        """The service as the target reports it, and whether its endpoint answers."""

    def logs(self, dep: Deployment, lines: int, follow: bool, sink: Callable[[bytes], None] | None,
             ctx: Context) -> str:
        """The service log (journal, supervisor log, container log); streamed to `sink` with follow."""

    def start(self, dep: Deployment, ctx: Context) -> Deployment: ...

    def stop(self, dep: Deployment, ctx: Context) -> Deployment: ...

    def destroy(self, dep: Deployment, ctx: Context) -> None:
        """Remove everything of the deployment from the target (the caller forgets the record)."""

    def rollback(self, dep: Deployment, ctx: Context, to: int | str | None = None) -> Deployment:
        """Serve an earlier complete release again (the newest older one, or `to`)."""

    def gc(self, spec: TargetSpec, ctx: Context) -> dict[str, Any]:
        """Sweep what interrupted commands left on a target and collect unused shared files."""


# --- shared pieces --------------------------------------------------------------------------------


def bundle_ref(runtime: Bundle) -> BundleRef:
    return BundleRef(runtime.name, str(runtime.path), runtime.sha256, runtime.version, runtime.size)


def credentials(job: DeployJob, host: str) -> tuple[Any, bytes, Tls | None]:
    """(local token file, token, TLS) of the deployment: reused by every redeploy."""
    token_file, token = auth.token_for(job.dep_id)
    tls = auth.tls_for(job.dep_id, job.req.tls, job.req.tls_cert, job.req.tls_key, host)
    return token_file, token, tls


def free_local_port() -> int:
    """A port free on this machine now (for the printed tunnel command)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_record(job: DeployJob, runtime: Bundle, *, home: str, init: str, port: int, bind: str, url: str,
               boot: str, token_file: Any, tls: Tls | None, sudo: bool = False, helper: bool = False) -> Deployment:
    """The record of this deploy attempt (status incomplete until it finished), merged with the old."""
    old = job.existing
    cap = job.capsule
    dep = Deployment(
        deployment_id=job.dep_id, provider=job.req.target.provider, target=job.req.target,
        manifest_path=str(cap.manifest_path), name=cap.name, version=cap.version, status="incomplete", url=url,
        ip=job.req.target.host or "127.0.0.1", started_at=old.started_at if old else "", home=home, init=init,
        sudo=sudo, helper=helper, service_port=port, bind=bind, boot=boot, keep_sessions=job.req.keep_sessions,
        release=old.release if old else None, previous=old.previous if old else None,
        bundles=list(old.bundles) if old else [], artifacts=list(old.artifacts) if old else [],
        precompiled=list(old.precompiled) if old else [], mur_version=runtime.version,
        token_file=str(token_file), tls_pin=tls.pin_sha256 if tls else None,
        tunnel=old.tunnel if old else None, tunnel_port=old.tunnel_port if old else None,
        extra=dict(old.extra) if old else {})  # keys other commands keep (a fleet's place: mur.fleet)
    dep.uses(runtime.name, [(a.name, a.version) for a in cap.artifacts], [])
    return dep


def endpoint_check(target: Target, port: int, dep_token: bytes | None, pin: str | None,
                   wait: float) -> dict[str, Any]:
    """The service's agent card and token check, through the target's port seam."""
    from mur.deploy.health import wait_until_up

    token = dep_token.decode().strip() if dep_token else None
    with target.open_port(port) as (host, local_port):
        return wait_until_up(host, local_port, wait, token=token, pin=pin)


def read_token(dep: Deployment) -> bytes | None:
    try:
        return open(dep.token_file, "rb").read().strip() if dep.token_file else None  # noqa: SIM115
    except OSError:
        return None


def wait_ready(read_state: Callable[[], ServiceState], probe: Callable[[float], dict[str, Any]],
               timeout: float, poll: float = 1.0) -> dict[str, Any]:
    """Wait until the runtime reported its startup line and the endpoint answers with the token.

    Fails early when the service exits before that (a restart counted, or the supervisor gone),
    so a failed start is reported with its log instead of waiting out the timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            st = read_state()
        except MurError as err:  # e.g. the container is gone
            return {"ok": False, "error": err.message}
        if st.ready:
            res = probe(min(15.0, max(1.0, deadline - time.monotonic())))
            if res.get("ok") or res.get("auth") is False:
                return {**res, "state": st.to_dict()}
        elif st.restarts > 0 or st.exited or st.looping:
            last = f", last exit status {st.last_exit}" if st.last_exit is not None else ""
            return {"ok": False, "error": f"the service exited during startup (state {st.state}, "
                                          f"{st.restarts} restarts{last})", "state": st.to_dict()}
        if time.monotonic() >= deadline:
            return {"ok": False, "error": f"the service was not ready within {timeout:.0f}s", "state": st.to_dict()}
        time.sleep(poll)


class Service:
    """One deployment's service on a connected target: state, start, stop, logs, health."""

    def __init__(self, target: Target, lay: Layout, init: str, sudo: bool):
        self.t, self.lay, self.init, self.sudo = target, lay, init_for(init), sudo

    def state(self) -> ServiceState:
        step = self.init.status(self.lay, self.sudo)
        return self.init.parse_status(run_step(self.t, step).stdout)

    def log_tail(self, lines: int = 40) -> str:
        res = run_step(self.t, self.init.logs(self.lay, lines, False, self.sudo))
        return (res.stdout or res.stderr).strip()[-3000:]

    def wait(self, port: int, token: bytes | None, pin: str | None, timeout: float) -> dict[str, Any]:
        return wait_ready(self.state, lambda w: endpoint_check(self.t, port, token, pin, w), timeout)

    def answers(self, port: int, token: bytes | None, pin: str | None) -> dict[str, Any]:
        if not self.state().ready:
            return {"ok": False, "error": "service not running"}
        return endpoint_check(self.t, port, token, pin, 3)

    def failed(self, card: dict[str, Any], after: str, what: str = "the capsule did not start") -> MurError:
        """E-DEPLOY-004 with the service log's last lines (E-DEPLOY-014 when they say the disk is full)."""
        log = self.log_tail()
        full = full_line(log)
        if full is not None:
            return self.t.disk_full(what, detail=full)
        return MurError("E-DEPLOY-004", f"{what} on {self.t.label}: {card.get('error', 'no agent card')}\n"
                        f"remote log:\n{quoted(log)}", after)


def forget_reservation(job: DeployJob) -> None:
    """Forget the record this command reserved (mur.deploy.operations), if it is still only that:
    nothing was deployed, so no `incomplete` record and no credentials are left for a deployment
    that never existed (a target that could not be reached, an engine that is not running)."""
    if not job.created:
        return
    token = job.reservation
    with uninterrupted():
        gone = job.ctx.store.remove(job.dep_id, only_if=lambda d: bool(d.pending)
                                    and d.pending.get("command") == "reserved" and d.pending.get("token") == token)
    if gone:
        auth.forget(job.dep_id)


def undo_or_leave(ctx: Context, s: Any, a: Attempt, exc: BaseException, dep_id: str, command: str,
                  repair: str, fallback: Deployment | None = None, **facts: Any) -> list[str]:
    """After a failure or Ctrl-C: undo the attempt's steps within the undo budget, on a connection
    that holds the lock again (`s.regain`: a fresh one when the old is dead). What is left is written into the
    record (`incomplete`, what is left, why, how to repair) and returned."""
    if a.phase is Phase.DONE or not a.pending():
        return []
    interrupted = isinstance(exc, KeyboardInterrupt)
    budget = ctx.deadlines.undo
    t0 = time.monotonic()
    why, left = "", []
    # the budget is a promise (one Ctrl-C ends the command within it): past it, the connection is
    # cut from here, which ends whatever the undo waits for
    target = getattr(s, "t", None)
    timer = threading.Timer(budget + 1.0, lambda: target.abort("the undo ran out of time") if target else None)
    timer.daemon = True
    timer.start()
    try:
        with ctx.phase("undo", f"interrupted: undoing this {command}" if interrupted else f"undoing this {command}", s.t):
            if not s.regain(budget):
                left, why = a.pending(), "another command took the deployment's lock meanwhile"
            else:
                left = a.undo(max(0.5, budget - (time.monotonic() - t0)),
                              on_step=lambda label: ctx.reporter.note(f"undo: {label}"))
                why = "the undo did not finish" if left else ""
    except KeyboardInterrupt:
        left, why = a.pending(), "interrupted again"
    except MurError as err:
        left, why = a.pending(), err.message.splitlines()[0]
    finally:
        timer.cancel()
    if not left:
        return []
    pending = {"command": command, "at": now_rfc3339(), "phase": a.phase.value, "left": left, "why": why,
               "repair": repair, **facts}

    def mark(d: Deployment) -> None:
        d.status, d.pending = "incomplete", pending

    with uninterrupted():
        if ctx.store.update(dep_id, mark) is None and fallback is not None:
            mark(fallback)
            ctx.store.save(fallback)
    ctx.reporter.note(f"could not undo everything ({why}): {dep_id} is recorded as incomplete; left: "
                      f"{'; '.join(left)}. {repair}")
    return left
