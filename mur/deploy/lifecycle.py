"""`mur deploy ls | status | logs | start | stop | destroy | rollback` for recorded deployments.

Upstream's `mur destroy` only forgot the record and left the process running; here stop and destroy
act on the target (systemd unit or supervisor, then files), and only then is the record dropped.
Rollback switches `current` back to the previous release (bundle, capsule and config together,
since all three live in the release directory) and restarts, reverting if it does not answer.
"""

from __future__ import annotations

import shlex
import time
from typing import Any, Callable

from mur.deploy.apply import apply_steps, run_step
from mur.deploy.connect import TargetSpec, connect
from mur.deploy.plan import Layout, activate_steps, destroy_steps, start_steps, stop_steps
from mur.deploy.progress import QUIET, Progress
from mur.deploy.service import agent_card_on_target, read_current, remote_error, service_state, wait_healthy
from mur.deploy.state import DeploymentStore, now_rfc3339
from mur.deploy.targets.base import Target
from mur.errors import MurError


def list_deployments(store: DeploymentStore | None = None) -> list[dict[str, Any]]:
    return (store or DeploymentStore()).load()


def render_table(records: list[dict[str, Any]]) -> str:
    """Upstream's `mur ps` table, with the provider's real address instead of an empty region."""
    if not records:
        return "no deployments\n"
    head = f"{'DEPLOYMENT_ID':<38}  {'PROVIDER':<8}  {'TARGET':<24}  {'NAME':<16}  {'STATUS':<8}  URL"
    lines = [head, "-" * 110]
    for r in records:
        t = r.get("target") or {}
        where = (f"{t.get('user')}@{t.get('host')}:{t.get('port')}" if r.get("provider") == "ssh"
                 else r.get("container") or r.get("provider", ""))
        lines.append(f"{r.get('deployment_id', ''):<38}  {r.get('provider', ''):<8}  {where[:24]:<24}  "
                     f"{str(r.get('name', ''))[:16]:<16}  {r.get('status', ''):<8}  {r.get('url', '')}")
    return "\n".join(lines) + "\n"


def _open(rec: dict[str, Any], progress: Progress) -> Target:
    spec = TargetSpec.from_record(rec)
    return connect(spec, note=progress.note)


def _layout(rec: dict[str, Any], target: Target) -> Layout:
    return Layout(rec.get("home") or target.home, rec["deployment_id"])


def _sudo(rec: dict[str, Any], target: Target) -> bool:
    return bool(rec.get("sudo")) and not target.is_root


def status(ident: str, progress: Progress = QUIET) -> dict[str, Any]:
    """Service state, URL, and whether the agent card answers."""
    store = DeploymentStore()
    rec = store.find(ident)
    if rec.get("provider") == "docker":
        from mur.deploy.docker_deploy import docker_status

        return docker_status(rec, store)
    with _open(rec, progress) as target:
        lay = _layout(rec, target)
        init = rec.get("init", "supervisor")
        state = service_state(target, lay, init, _sudo(rec, target))
        card = agent_card_on_target(target, lay, int(rec["service_port"]), wait=3) if state.get("ready") else \
            {"ok": False, "error": "service not running"}
    observed = "running" if state.get("running") and card.get("ok") else ("stopped" if rec.get("status") == "stopped"
                                                                          else "failed" if not state.get("running") else "starting")
    store.update(rec["deployment_id"], status=observed)
    return {"deployment_id": rec["deployment_id"], "provider": rec.get("provider"), "name": rec.get("name"),
            "url": rec.get("url"), "tunnel": rec.get("tunnel"), "init": init, "status": observed,
            "service": state, "agent_card_ok": bool(card.get("ok")), "agent_card": card.get("agent_card"),
            "release": (rec.get("release") or {}).get("n"), "previous": (rec.get("previous") or {}).get("n")}


def logs(ident: str, lines: int = 200, follow: bool = False, sink: Callable[[bytes], None] | None = None) -> str:
    rec = DeploymentStore().find(ident)
    if rec.get("provider") == "docker":
        from mur.deploy.docker_deploy import docker_logs

        return docker_logs(rec, lines, follow, sink)
    with _open(rec, QUIET) as target:
        lay = _layout(rec, target)
        if rec.get("init") == "systemd":
            from mur.deploy.systemd import logs_command

            cmd = logs_command(lay, lines, follow)
        else:
            cmd = f"tail -n {int(lines)} {'-F ' if follow else ''}{lay.log_file}"
        sudo = _sudo(rec, target) and rec.get("init") == "systemd"  # the system journal needs privileges
        if follow and sink is not None:
            target.stream(f"sudo -n sh -c {shlex.quote(cmd)}" if sudo else cmd, sink)
            return ""
        res = target.run(cmd, check=False, sudo=sudo)
        return res.stdout + (res.stderr if res.rc else "")


def start(ident: str, progress: Progress = QUIET, timeout: float = 180.0) -> dict[str, Any]:
    store = DeploymentStore()
    rec = store.find(ident)
    if rec.get("provider") == "docker":
        from mur.deploy.docker_deploy import docker_start

        return docker_start(rec, store, progress, timeout)
    with _open(rec, progress) as target:
        lay = _layout(rec, target)
        init = rec.get("init", "supervisor")
        with progress.step("start"):
            for step in start_steps(lay, init, _sudo(rec, target)):
                run_step(target, step)
            card = wait_healthy(target, lay, init, int(rec["service_port"]), timeout, _sudo(rec, target))
        if not card.get("ok"):
            raise MurError("E-DEPLOY-004", f"the capsule did not start: {card.get('error')}\nremote log:\n"
                           f"{remote_error(target, lay, init, sudo=_sudo(rec, target))}")
    store.update(rec["deployment_id"], status="running", updated_at=now_rfc3339())
    return {"deployment_id": rec["deployment_id"], "status": "running", "url": rec.get("url")}


def stop(ident: str, progress: Progress = QUIET) -> dict[str, Any]:
    """Stop the service (unit or supervisor, whole process tree); files and record stay."""
    store = DeploymentStore()
    rec = store.find(ident)
    if rec.get("provider") == "docker":
        from mur.deploy.docker_deploy import docker_stop

        return docker_stop(rec, store, progress)
    with _open(rec, progress) as target:
        lay = _layout(rec, target)
        with progress.step(f"stop {rec['deployment_id']}"):
            apply_steps(target, stop_steps(lay, rec.get("init", "supervisor"), _sudo(rec, target)))
            state = service_state(target, lay, rec.get("init", "supervisor"), _sudo(rec, target))
    store.update(rec["deployment_id"], status="stopped", updated_at=now_rfc3339())
    return {"deployment_id": rec["deployment_id"], "status": "stopped", "service": state}


def destroy(ident: str, progress: Progress = QUIET, force: bool = False) -> dict[str, Any]:
    """Stop, remove the unit and remote files (and now-unused runtimes/artifacts), then forget."""
    store = DeploymentStore()
    rec = store.find(ident)
    dep_id = rec["deployment_id"]
    if rec.get("provider") == "docker":
        from mur.deploy.docker_deploy import docker_destroy

        return docker_destroy(rec, store, progress, force)
    try:
        with _open(rec, progress) as target:
            lay = _layout(rec, target)
            with progress.step(f"destroy {dep_id}"):
                arts = [tuple(a) for a in rec.get("artifacts", [])]
                # On this machine the runtime file is also the local cache: keep it.
                bundles = [] if rec.get("provider") == "local" else list(rec.get("bundles", []))
                apply_steps(target, destroy_steps(lay, rec.get("init", "supervisor"), _sudo(rec, target), bundles,
                                                  arts, list(rec.get("precompiled", []))))  # type: ignore[arg-type]
                left = target.exists(lay.root)
            if left:
                raise MurError("E-DEPLOY-003", f"{lay.root} is still present on {target.label} after destroy")
    except MurError:
        if not force:
            raise
        progress.note("remote cleanup failed; forgetting the deployment anyway (--force)")
    store.remove(dep_id)
    return {"deployment_id": dep_id, "status": "destroyed", "host": rec.get("ip")}


def rollback(ident: str, progress: Progress = QUIET, timeout: float = 180.0) -> dict[str, Any]:
    """Serve the previous release again (its bundle, capsule and config)."""
    store = DeploymentStore()
    rec = store.find(ident)
    prev = rec.get("previous")
    if not prev:
        raise MurError("E-DEPLOY-011", f"deployment {rec['deployment_id']} has no previous release to roll back to",
                       "rollback needs at least two successful deploys")
    if rec.get("provider") == "docker":
        from mur.deploy.docker_deploy import docker_rollback

        return docker_rollback(rec, store, progress, timeout)
    with _open(rec, progress) as target:
        lay = _layout(rec, target)
        init = rec.get("init", "supervisor")
        sudo = _sudo(rec, target)
        current, numbers = read_current(target, lay)
        if int(prev["n"]) not in numbers:
            raise MurError("E-DEPLOY-011", f"release {prev['n']} is no longer on the target (pruned)")
        t0 = time.monotonic()
        with progress.step(f"switch to release {prev['n']}"):
            for step in activate_steps(lay, int(prev["n"]), init, sudo):
                apply_steps(target, [step])
            card = wait_healthy(target, lay, init, int(rec["service_port"]), timeout, sudo)
        if not card.get("ok"):
            err = remote_error(target, lay, init, sudo=sudo)
            if current:
                for step in activate_steps(lay, int(current["n"]), init, sudo):
                    apply_steps(target, [step])
            raise MurError("E-DEPLOY-004", f"release {prev['n']} did not start: {card.get('error')}\nremote log:\n{err}",
                           f"switched back to release {current['n'] if current else '?'}")
    store.update(rec["deployment_id"], release=prev, previous=rec.get("release"), status="running",
                 updated_at=now_rfc3339())
    return {"deployment_id": rec["deployment_id"], "status": "running", "release": prev["n"],
            "previous": (rec.get("release") or {}).get("n"), "url": rec.get("url"),
            "elapsed": round(time.monotonic() - t0, 2), "agent_card": card.get("agent_card")}
