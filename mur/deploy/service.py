"""`mur deploy`: put a capsule on a target as a supervised service, reached over A2A.

Flow for SSH and local targets (Docker: ``mur.deploy.docker_deploy``):
  gather inputs (no target contact) -> connect -> pinned runtime -> preflight (E-CAP-003 /
  E-DEPLOY-007) -> compare with the serving release (unchanged + healthy: done, nothing
  uploaded) -> upload the new release -> smoke-start it on a spare port while the old one keeps
  serving -> switch `current`, restart, wait for the agent card -> on failure switch back and
  show the remote error -> record in ~/.murmur/deployments.json.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur import __version__
from mur.deploy import bundle as bundles
from mur.deploy.apply import apply_steps, run_step
from mur.deploy.connect import TargetSpec, connect
from mur.deploy.inputs import CapsuleInputs, gather
from mur.deploy.plan import (
    KEEP_RELEASES, BundleRef, Layout, ReleaseInputs, ReleasePlan, ServiceConfig, activate_steps,
    artifact_verify_command, listening_ports, pick_port, plan_release, prune_command, start_steps, stop_steps,
)
from mur.deploy.preflight import Report, preflight_host
from mur.deploy.progress import QUIET, Progress
from mur.deploy.state import DeploymentStore, new_deployment_id, now_rfc3339
from mur.deploy.targets.base import Target
from mur.errors import MurError
from mur.platform import platform_tag


@dataclass
class DeployRequest:
    manifest: Path
    target: TargetSpec
    workdir: Path | None = None
    env_args: list[str] = field(default_factory=list)
    env_file: Path | None = None
    release_source: str | None = None
    mur_binary: Path | None = None
    use_bundle: bool = False
    publish: bool = False
    init: str = "auto"
    containment: str | None = None
    trust_new_host: bool = False
    deployment_id: str | None = None
    start_timeout: float = 180.0
    base_image: str = "mur-base:bookworm"
    seccomp_profile: str | None = None
    keep_lifecycle: bool = False
    precompile: bool = True


# --- shared helpers ---------------------------------------------------------------------------


def resolve_runtime(req: DeployRequest, inputs: CapsuleInputs, plat: str, progress: Progress) -> bundles.Bundle:
    """The runtime for the capsule's pin (local version when unpinned)."""
    pin = inputs.mur_version or __version__
    if req.mur_binary:
        return bundles.use_explicit_bundle(req.mur_binary, pin)
    if req.target.provider == "local" and not req.use_bundle and pin == __version__:
        return bundles.installed_runtime()
    return bundles.resolve_bundle(pin, plat, req.release_source or _config_release_source(), progress.note)


def precompiled_components(req: DeployRequest, inputs: CapsuleInputs, plat: str, progress: Progress) -> tuple:
    """Components compiled here for the target's engine cache (not for this machine: it caches itself)."""
    from mur.deploy import precompile as pc

    if req.target.provider == "local" or not req.precompile:
        return ()
    why = pc.supported(plat)
    if why:
        progress.note(f"components compile on the target at first start: {why}")
        return ()
    sources = pc.wasm_sources(inputs.files, inputs.artifacts, inputs.manifest_path.parent)
    if not sources:
        return ()
    with progress.step(f"precompile {len(sources)} component(s) for {plat}"):
        return tuple(p.file for p in pc.precompile(sources, plat, progress.note))


def _config_release_source() -> str | None:
    try:
        from mur.manifest.config import load_config

        return load_config().release_source
    except ImportError:  # pragma: no cover
        return bundles.configured_release_source()


def find_existing(store: DeploymentStore, req: DeployRequest) -> dict[str, Any] | None:
    """The deployment this request redeploys: by --id, else same target + same manifest."""
    records = store.load()
    if req.deployment_id:
        from mur.deploy.state import resolve_id

        return resolve_id(records, req.deployment_id)
    manifest = str(req.manifest.resolve())
    for rec in reversed(records):
        if rec.get("manifest_path") == manifest and TargetSpec.from_record(rec).same_place(req.target):
            return rec
    return None


def base_url(bind: str, host: str, port: int) -> str:
    return f"http://{host if bind not in ('127.0.0.1', 'localhost') else '127.0.0.1'}:{port}"


def read_current(target: Target, lay: Layout) -> tuple[dict[str, Any] | None, list[int]]:
    """(release.json of `current` or None, release numbers present)."""
    q = shlex.quote
    res = target.run(f"cat {q(lay.current + '/release.json')} 2>/dev/null; echo '@@mur@@'; ls -1 {q(lay.releases)} 2>/dev/null; true",
                     check=False)
    head, _, tail = res.stdout.partition("@@mur@@")
    current = None
    if head.strip():
        try:
            current = json.loads(head)
        except ValueError:
            current = None
    nums = sorted(int(x) for x in tail.split() if x.isdigit())
    return current, nums


def agent_card_on_target(target: Target, lay: Layout, port: int, wait: float) -> dict[str, Any]:
    """Does the service answer its agent card on the target's loopback?"""
    return target.agent_card(port, wait, lay.current + "/mur")


def service_state(target: Target, lay: Layout, init: str, sudo: bool = False) -> dict[str, Any]:
    """The service as the target sees it, read with the shell (no runtime start).

    `running`: the process is up (or restarting); `ready`: the runtime printed its startup line,
    i.e. staging and compilation are done (the A2A port answers earlier than that).
    """
    q = shlex.quote
    if init == "systemd":
        from mur.deploy.systemd import parse_show, ready_command, status_command

        props = parse_show(target.run(status_command(lay), check=False).stdout)
        active = props.get("ActiveState", "unknown")
        inv = props.get("InvocationID", "")
        ready = bool(inv) and active == "active" and target.run(ready_command(inv), sudo=sudo, check=False).rc == 0
        return {"state": active, "sub_state": props.get("SubState"), "main_pid": props.get("MainPID"),
                "restarts": int(props.get("NRestarts") or 0), "running": active in ("active", "activating", "reloading"),
                "ready": ready, "load": props.get("LoadState")}
    res = target.run(f"cat {q(lay.run_dir + '/state.json')} 2>/dev/null", check=False)
    try:
        st = json.loads(res.stdout)
    except ValueError:
        return {"state": "absent", "alive": False, "running": False, "ready": False, "restarts": 0}
    pid = st.get("supervisor_pid")
    st["alive"] = bool(pid) and target.run(f"test -d /proc/{int(pid)}", check=False).rc == 0
    if not st["alive"] and st.get("state") not in ("stopped", "exited"):
        st["state"] = "dead"
    st["running"] = bool(st["alive"]) and st.get("state") in ("running", "starting", "backoff")
    st["ready"] = bool(st["alive"]) and st.get("state") == "running" and bool(st.get("url"))
    return st


def remote_error(target: Target, lay: Layout, init: str, lines: int = 40, sudo: bool = False) -> str:
    """The tail of the service log: what the user needs to see when a start fails."""
    from mur.deploy.systemd import logs_command

    cmd = logs_command(lay, lines) if init == "systemd" else f"tail -n {lines} {shlex.quote(lay.log_file)}"
    res = target.run(cmd, check=False, sudo=sudo and init == "systemd")
    return (res.stdout or res.stderr).strip()[-3000:]


def wait_healthy(target: Target, lay: Layout, init: str, port: int, timeout: float, sudo: bool = False) -> dict[str, Any]:
    """Wait until the runtime reported its startup line and the agent card answers.

    Fails early when the service exits before that (a restart counted, or the supervisor gone):
    a failed start is reported with its log instead of waiting out the timeout.
    """
    deadline = time.monotonic() + timeout
    st: dict[str, Any] = {}
    while True:
        st = service_state(target, lay, init, sudo)
        if st.get("ready"):
            card = agent_card_on_target(target, lay, port, wait=min(15.0, max(1.0, deadline - time.monotonic())))
            if card.get("ok"):
                return {**card, "state": st}
        elif int(st.get("restarts") or 0) > 0 or st.get("state") in ("dead", "exited", "stopped", "failed"):
            return {"ok": False, "error": f"the service exited during startup (state {st.get('state')}, "
                                          f"{st.get('restarts') or 0} restarts)", "state": st}
        if time.monotonic() >= deadline:
            return {"ok": False, "error": f"the service was not ready within {timeout:.0f}s", "state": st}
        time.sleep(1.0)


# --- deploy -----------------------------------------------------------------------------------


def check(req: DeployRequest, progress: Progress = QUIET) -> Report:
    """`mur deploy --check`: the preflight report only."""
    inputs = gather(req.manifest, workdir=req.workdir, env_args=req.env_args, env_file=req.env_file,
                    containment=req.containment, keep_lifecycle=req.keep_lifecycle)
    if req.target.provider == "docker":
        from mur.deploy.docker_deploy import docker_check

        return docker_check(req, inputs, progress)
    store = DeploymentStore()
    existing = find_existing(store, req)
    dep_id = existing["deployment_id"] if existing else new_deployment_id()
    with progress.step(f"connect {req.target.provider} {req.target.host}".strip()):
        target = connect(req.target, trust_new_host=req.trust_new_host, note=progress.note)
    with target:
        plat = platform_tag(*target.uname())
        runtime = resolve_runtime(req, inputs, plat, progress)
        with progress.step("preflight"):
            return preflight_host(target, runtime, inputs, dep_id=dep_id, init_pref=req.init, progress=progress.note)


def deploy(req: DeployRequest, progress: Progress = QUIET) -> dict[str, Any]:
    """Deploy (or redeploy) a capsule; returns the result object `--json` prints."""
    t0 = time.monotonic()
    with progress.step("read capsule"):
        inputs = gather(req.manifest, workdir=req.workdir, env_args=req.env_args, env_file=req.env_file,
                        containment=req.containment, keep_lifecycle=req.keep_lifecycle)
    for note in inputs.notes:
        progress.note(note)
    store = DeploymentStore()
    existing = find_existing(store, req)
    dep_id = existing["deployment_id"] if existing else (req.deployment_id or new_deployment_id())
    if req.target.provider == "docker":
        from mur.deploy.docker_deploy import docker_deploy

        return docker_deploy(req, inputs, dep_id, existing, store, progress, t0)
    with progress.step(f"connect {req.target.provider} {req.target.host}".strip()):
        target = connect(req.target, trust_new_host=req.trust_new_host, note=progress.note)
    with target:
        return _deploy_host(req, inputs, dep_id, existing, store, target, progress, t0)


def _deploy_host(req: DeployRequest, inputs: CapsuleInputs, dep_id: str, existing: dict[str, Any] | None,
                 store: DeploymentStore, target: Target, progress: Progress, t0: float) -> dict[str, Any]:
    plat = platform_tag(*target.uname())
    with progress.step(f"mur {inputs.mur_version or __version__} runtime for {plat}"):
        runtime = resolve_runtime(req, inputs, plat, progress)
    with progress.step("preflight"):
        report = preflight_host(target, runtime, inputs, dep_id=dep_id, init_pref=req.init, progress=progress.note)
    report.raise_if_failed()
    init = str(report.facts["init"])
    privileged = report.facts.get("sudo") in ("root", "nopasswd")
    sudo = privileged and not target.is_root
    lay = Layout(target.home, dep_id)
    bind = "0.0.0.0" if req.publish else "127.0.0.1"

    current, numbers = read_current(target, lay)
    port = _choose_port(target, dep_id, existing, current, inputs)
    svc = ServiceConfig(port=port, bind=bind, restart=inputs.restart_policy, init=init,
                        user=None if target.is_root else target.user, memory_bytes=inputs.service_memory_bytes,
                        tasks_max=inputs.service_tasks_max, env=tuple(sorted(inputs.env.items())),
                        run_args=inputs.run_args)
    n = (max(numbers) + 1) if numbers else 1
    compiled = precompiled_components(req, inputs, plat, progress)
    rin = ReleaseInputs(
        dep_id=dep_id, home=target.home, n=n,
        bundle=BundleRef(runtime.name, str(runtime.path), runtime.sha256, runtime.version, runtime.size),
        manifest=inputs.manifest, files=inputs.files, workdir=inputs.workdir, artifacts=inputs.artifacts,
        service=svc, sudo=sudo, prev_n=int(current["n"]) if current else None, precompiled=compiled,
        capsule_name=inputs.name, capsule_version=inputs.version)
    plan = plan_release(rin)
    url = base_url(bind, req.target.host or "127.0.0.1", port)
    tunnel = target.tunnel_command(port) if req.target.provider == "ssh" and bind == "127.0.0.1" else None

    if current and current.get("digest") == plan.digest:
        state = service_state(target, lay, init, sudo)
        card = agent_card_on_target(target, lay, port, wait=5) if state.get("ready") else {"ok": False}
        if not card.get("ok"):
            with progress.step(f"start release {current['n']} (unchanged)"):
                for step in start_steps(lay, init, sudo):
                    run_step(target, step)
                card = wait_healthy(target, lay, init, port, req.start_timeout, sudo)
            if not card.get("ok"):
                raise _start_failed(target, lay, init, card, None, sudo)
        rec = _record(req, inputs, dep_id, existing, report, lay, url, tunnel, svc, current, existing and existing.get("previous"),
                      runtime, status="running")
        store.upsert(rec)
        return _result(rec, unchanged=True, uploaded=0, uploaded_bytes=0, elapsed=time.monotonic() - t0,
                       agent_card=card.get("agent_card"))

    with progress.step(f"upload release {n}"):
        stats = apply_steps(target, plan.prepare, dep_id, progress.note)
        verify = artifact_verify_command(rin)
        if verify:
            res = target.run(verify, check=False)
            if res.rc != 0:
                raise MurError("E-REG-002", f"artifact digest mismatch on {target.label} after upload: "
                               f"{(res.stdout + res.stderr).strip()[-500:]}")
    previous_serving = bool(current) and service_state(target, lay, init, sudo).get("ready")
    if previous_serving:
        with progress.step(f"smoke-start release {n} beside release {current['n']}"):
            _smoke(target, plan, dep_id, port, req.start_timeout)
    with progress.step(f"start release {n} ({init})"):
        for step in activate_steps(lay, n, init, sudo):
            apply_steps(target, [step])
        card = wait_healthy(target, lay, init, port, req.start_timeout, sudo)
        if not card.get("ok"):
            err = _start_failed(target, lay, init, card, current, sudo)
            _revert(target, lay, init, sudo, current, port, req.start_timeout)
            prev = existing.get("previous") if existing else None
            store.upsert(_record(req, inputs, dep_id, existing, report, lay, url, tunnel, svc, current, prev, runtime,
                                 status="running" if current else "failed"))
            raise err
    keep = [n] + ([int(current["n"])] if current else []) + sorted(numbers, reverse=True)[: KEEP_RELEASES - 2]
    target.run(prune_command(lay, keep), check=False)
    rec = _record(req, inputs, dep_id, existing, report, lay, url, tunnel, svc, plan.release_meta, current, runtime,
                  status="running")
    store.upsert(rec)
    return _result(rec, unchanged=False, uploaded=stats.uploaded, uploaded_bytes=stats.uploaded_bytes,
                   elapsed=time.monotonic() - t0, agent_card=card.get("agent_card"))


def _choose_port(target: Target, dep_id: str, existing: dict[str, Any] | None, current: dict[str, Any] | None,
                 inputs: CapsuleInputs) -> int:
    """Stable across redeploys: the recorded port, else network.internal_port, else a free one."""
    if inputs.internal_port:
        port = int(inputs.internal_port)
    elif existing and existing.get("service_port"):
        return int(existing["service_port"])
    elif current and current.get("port"):
        return int(current["port"])
    else:
        port = 0
    busy = listening_ports(target.run("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true", check=False).stdout)
    ours = (existing or {}).get("service_port") or (current or {}).get("port")
    if port:
        if port in busy and port != ours:
            raise MurError("E-DEPLOY-007", f"network.internal_port {port} is already in use on {target.label}",
                           "free the port or change network.internal_port")
        return port
    return pick_port(dep_id, busy)


def _smoke(target: Target, plan: ReleasePlan, dep_id: str, port: int, timeout: float) -> None:
    q = shlex.quote
    busy = listening_ports(target.run("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true", check=False).stdout)
    spare = pick_port(dep_id, busy | {port}, salt=1)
    rel = plan.release_dir
    res = target.run(f"{q(rel + '/mur')} supervise --smoke --spec {q(rel + '/service.json')} --release-dir {q(rel)} "
                     f"--port {spare} --timeout {int(timeout)}", check=False, timeout=timeout + 60)
    try:
        out = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {"ok": False, "error": (res.stderr or res.stdout).strip()[-800:]}
    if not out.get("ok"):
        raise MurError(
            "E-DEPLOY-004",
            f"the new release did not start on {target.label}: {out.get('error')}\n"
            f"remote stderr:\n{(out.get('stderr') or '').strip()[-1500:]}",
            "the previous release keeps serving; fix the capsule and deploy again",
        )


def _start_failed(target: Target, lay: Layout, init: str, card: dict[str, Any], previous: dict[str, Any] | None,
                  sudo: bool = False) -> MurError:
    log = remote_error(target, lay, init, sudo=sudo)
    after = (f"switched back: release {previous['n']} is serving again" if previous
             else "nothing is left running; the files stay for inspection until `mur deploy destroy`")
    return MurError("E-DEPLOY-004", f"the capsule did not start on {target.label}: {card.get('error', 'no agent card')}\n"
                    f"remote log:\n{log}", after)


def _revert(target: Target, lay: Layout, init: str, sudo: bool, previous: dict[str, Any] | None, port: int,
            timeout: float) -> None:
    if previous:
        for step in activate_steps(lay, int(previous["n"]), init, sudo):
            apply_steps(target, [step])
        wait_healthy(target, lay, init, port, timeout, sudo)
        return
    for step in stop_steps(lay, init, sudo):
        apply_steps(target, [step])
    if init == "systemd":
        target.run(f"systemctl disable --quiet {lay.unit_name}; rm -f {shlex.quote(lay.unit_path)}; systemctl daemon-reload",
                   sudo=sudo, check=False)
    target.run(f"rm -f {shlex.quote(lay.current)}", check=False)


def _record(req: DeployRequest, inputs: CapsuleInputs, dep_id: str, existing: dict[str, Any] | None, report: Report,
            lay: Layout, url: str, tunnel: str | None, svc: ServiceConfig, release: dict[str, Any] | None,
            previous: dict[str, Any] | None, runtime: bundles.Bundle, status: str) -> dict[str, Any]:
    old = existing or {}
    used_bundles = sorted(set(old.get("bundles", [])) | {runtime.name})
    used_artifacts = sorted({tuple(x) for x in old.get("artifacts", [])} | {(a.name, a.version) for a in inputs.artifacts})
    used_compiled = sorted(set(old.get("precompiled", [])) | set((release or {}).get("precompiled", [])))
    prev = previous if previous and release and previous.get("n") != release.get("n") else old.get("previous")
    return {
        "deployment_id": dep_id,
        "provider": req.target.provider,
        "provider_vm_id": "",
        "region": "",
        "ip": req.target.host or "127.0.0.1",
        "url": url,
        "manifest_path": str(inputs.manifest_path),
        "started_at": old.get("started_at") or now_rfc3339(),
        "updated_at": now_rfc3339(),
        "status": status,
        "name": inputs.name,
        "version": inputs.version,
        "target": req.target.to_record(),
        "home": lay.home,
        "init": svc.init,
        "service_port": svc.port,
        "bind": svc.bind,
        "sudo": bool(report.facts.get("sudo") == "nopasswd"),
        "tunnel": tunnel,
        "release": release,
        "previous": prev,
        "bundles": used_bundles,
        "artifacts": [list(a) for a in used_artifacts],
        "precompiled": used_compiled,
        "mur_version": runtime.version,
    }


def _result(rec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    out = {k: rec.get(k) for k in ("deployment_id", "provider", "name", "version", "url", "tunnel", "status", "init",
                                   "service_port", "mur_version")}
    out["release"] = (rec.get("release") or {}).get("n")
    out.update(extra)
    if isinstance(out.get("elapsed"), float):
        out["elapsed"] = round(out["elapsed"], 2)
    return out
