"""What `mur deploy ...` does, one function per command: load the record, pick the provider
(mur.deploy.providers.provider_for, the one dispatch point), call it, return plain data.

mur/cli/deploy.py parses options, calls one of these, renders the result.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Callable

from mur.deploy import auth
from mur.resolve.shipped import ShippedCapsule, ship
from mur.deploy.preflight import Report
from mur.progress import QUIET, Reporter
from mur.deploy.providers import provider_for
from mur.deploy.providers.base import Context, DeployJob
from mur.deploy.request import DeployRequest
from mur.deploy.targets import TargetSpec
from mur.deploy.state import Deployment, DeploymentStore, new_deployment_id, now_rfc3339, resolve_id
from mur.errors import MurError


def _job(req: DeployRequest, ctx: Context, reserve: bool = True) -> DeployJob:
    with ctx.reporter.step("read capsule"):
        cap: ShippedCapsule = ship(req.manifest, workdir=req.workdir, env_args=list(req.env_args),
                                    env_file=req.env_file, containment=req.containment,
                                    keep_lifecycle=req.keep_lifecycle)
    for note in cap.notes():
        ctx.reporter.note(note)
    if not reserve:
        existing = find_existing(ctx.store, req)
        return DeployJob(req, cap, existing.deployment_id if existing else new_deployment_id(), existing, ctx)
    # One deployment per capsule and target in this HOME, even for two deploys started at once:
    # the record is found or reserved under the records' lock, and the target's lock does the rest.
    token = secrets.token_hex(8)

    def make() -> Deployment:
        return Deployment(deployment_id=new_deployment_id(), provider=req.target.provider, target=req.target,
                          manifest_path=str(cap.manifest_path), name=cap.name, version=cap.version,
                          ip=req.target.host or "127.0.0.1", status="incomplete",
                          pending={"command": "reserved", "token": token, "at": now_rfc3339()})

    dep, created = ctx.store.reserve(make, lambda records: _pick(records, req))
    return DeployJob(req, cap, dep.deployment_id, None if created else dep, ctx, created=created,
                     reservation=token if created else "")


def _pick(records: list[Deployment], req: DeployRequest) -> Deployment | None:
    if req.deployment_id:
        return resolve_id(records, req.deployment_id)
    manifest = str(req.manifest.resolve())
    for rec in reversed(records):
        if rec.manifest_path == manifest and rec.target.same_place(req.target):
            return rec
    return None


def find_existing(store: DeploymentStore, req: DeployRequest) -> Deployment | None:
    """The deployment this request redeploys: by --id, else same target + same manifest."""
    return _pick(store.load(), req)


def check(req: DeployRequest, reporter: Reporter = QUIET, ctx: Context | None = None) -> Report:
    """`mur deploy --check`: the preflight report only."""
    ctx = ctx or Context(reporter=reporter, timeout=req.start_timeout)
    return provider_for(req.target.provider).check(_job(req, ctx, reserve=False))


def deploy(req: DeployRequest, reporter: Reporter = QUIET, ctx: Context | None = None) -> dict[str, Any]:
    """Deploy (or redeploy) a capsule; returns the result object `--json` prints."""
    t0 = time.monotonic()
    ctx = ctx or Context(reporter=reporter, timeout=req.start_timeout)
    out = provider_for(req.target.provider).deploy(_job(req, ctx))
    dep = out.deployment
    result = summary(dep)
    result.update({"unchanged": out.unchanged, "repaired": out.repaired, "uploaded": out.uploaded,
                   "uploaded_bytes": out.uploaded_bytes, "elapsed": round(time.monotonic() - t0, 2),
                   "agent_card": out.agent_card})
    return result


def summary(dep: Deployment) -> dict[str, Any]:
    """The fields every command's result shares."""
    return {"deployment_id": dep.deployment_id, "provider": dep.provider, "name": dep.name, "version": dep.version,
            "url": dep.url, "tunnel": dep.tunnel, "status": dep.status, "init": dep.init, "boot": dep.boot,
            "service_port": dep.service_port, "mur_version": dep.mur_version, "container": dep.container,
            "image": dep.image, "token_file": dep.token_file, "tls_pin": dep.tls_pin,
            "release": dep.release.ident if dep.release else None,
            "previous": dep.previous.ident if dep.previous else None, "pending": dep.pending}


def list_deployments(store: DeploymentStore | None = None) -> list[dict[str, Any]]:
    return [d.to_dict() for d in (store or DeploymentStore()).load()]


def _ctx(reporter: Reporter, ctx: Context | None, timeout: float | None = None) -> Context:
    ctx = ctx or Context(reporter=reporter)
    if timeout is not None:
        ctx.timeout = timeout
    return ctx


def status(ident: str, reporter: Reporter = QUIET, ctx: Context | None = None) -> dict[str, Any]:
    """What is true on the target (the record follows it where the target is consistent)."""
    ctx = _ctx(reporter, ctx)
    dep = ctx.store.find(ident)
    observed = provider_for(dep.provider).status(dep, ctx)
    dep = ctx.store.get(dep.deployment_id) or dep
    return {**summary(dep), **observed}


def logs(ident: str, lines: int = 200, follow: bool = False, sink: Callable[[bytes], None] | None = None) -> str:
    ctx = _ctx(QUIET, None)
    dep = ctx.store.find(ident)
    return provider_for(dep.provider).logs(dep, lines, follow, sink, ctx)


def start(ident: str, reporter: Reporter = QUIET, timeout: float = 180.0, ctx: Context | None = None) -> dict[str, Any]:
    ctx = _ctx(reporter, ctx, timeout)
    dep = ctx.store.find(ident)
    return summary(provider_for(dep.provider).start(dep, ctx))


def stop(ident: str, reporter: Reporter = QUIET, ctx: Context | None = None) -> dict[str, Any]:
    ctx = _ctx(reporter, ctx)
    dep = ctx.store.find(ident)
    return summary(provider_for(dep.provider).stop(dep, ctx))


def destroy(ident: str, reporter: Reporter = QUIET, force: bool = False, ctx: Context | None = None) -> dict[str, Any]:
    """Remove everything of the deployment from its target, then forget it (`force`: forget anyway)."""
    ctx = _ctx(reporter, ctx)
    dep = ctx.store.find(ident)
    try:
        provider_for(dep.provider).destroy(dep, ctx)
    except MurError:
        if not force:
            raise
        reporter.note("remote cleanup failed; forgetting the deployment anyway (--force); "
                      "`mur deploy gc` on that target removes what is left")
    ctx.store.remove(dep.deployment_id)
    auth.forget(dep.deployment_id)
    return {"deployment_id": dep.deployment_id, "status": "destroyed", "provider": dep.provider,
            "target": dep.target.label}


def rollback(ident: str, reporter: Reporter = QUIET, timeout: float = 180.0, to: int | None = None,
             ctx: Context | None = None) -> dict[str, Any]:
    """Serve an earlier complete release again (`to`: that release; default: the newest one older
    than the one `current` names, as the target lists them)."""
    t0 = time.monotonic()
    ctx = _ctx(reporter, ctx, timeout)
    dep = ctx.store.find(ident)
    out = summary(provider_for(dep.provider).rollback(dep, ctx, to))
    out["elapsed"] = round(time.monotonic() - t0, 2)
    return out


def gc(idents: list[str], target: TargetSpec | None = None, reporter: Reporter = QUIET,
       ctx: Context | None = None) -> list[dict[str, Any]]:
    """Sweep what interrupted commands left and collect unused shared files on targets: the given
    target, else the targets of the given deployments, else every target in the records (and this
    machine). Deployments another command holds are skipped, never waited for."""
    ctx = _ctx(reporter, ctx)
    records = ctx.store.load()
    if target is not None:
        targets = [target]
    elif idents:
        targets = [resolve_id(records, i).target for i in idents]
    else:
        targets = [r.target for r in records] + [TargetSpec("local")]
    seen: list[TargetSpec] = []
    for spec in targets:
        if not any(spec.same_place(s) for s in seen):
            seen.append(spec)
    return [provider_for(spec.provider).gc(spec, ctx) for spec in seen]

