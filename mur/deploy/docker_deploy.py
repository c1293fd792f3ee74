"""`mur deploy --docker`: the capsule as a container built from the local base image.

The same release plan as a VM is materialised into a build context (the release directory tree
under /root, the pinned bundle, the artifacts), so the container holds exactly the layout a VM
does; `mur supervise --foreground` is its main process (under tini). The env file is copied into
the created container before it starts, never into an image layer. The previous container is kept
stopped as `<name>-prev`: a failed start or a rollback brings it back with its own env.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from mur import __version__
from mur.deploy import bundle as bundles
from mur.deploy.inputs import CapsuleInputs
from mur.deploy.plan import (
    BundleRef, Layout, Mkdir, ReleaseInputs, ServiceConfig, Symlink, Upload, WriteFile, listening_ports, pick_port,
    plan_release,
)
from mur.deploy.preflight import Report, containment_check, parse_probe, parse_version
from mur.deploy.progress import Progress
from mur.deploy.service import DeployRequest, agent_card_on_target, service_state
from mur.deploy.state import DeploymentStore, now_rfc3339
from mur.deploy.targets.docker import (
    CAPSULE_DOCKERFILE, ENTRYPOINT, LABEL, ContainerTarget, DockerEngine, container_name, image_tag,
)

RELEASE_LABEL = "dev.mur.release"
from mur.errors import MurError
from mur.platform import platform_tag

HOME = "/root"


def _platform(info: dict[str, Any]) -> str:
    return platform_tag(str(info.get("OSType", "linux")), str(info.get("Architecture", "x86_64")))


def _apparmor(info: dict[str, Any]) -> bool:
    return any("apparmor" in str(o) for o in info.get("SecurityOptions") or [])


def materialise(plan_steps: list, ctx_root: Path, skip: set[str]) -> None:
    """Write a release plan into a directory tree (absolute target paths re-rooted at ctx_root)."""
    def local(p: str) -> Path:
        return ctx_root / p.lstrip("/")

    for step in plan_steps:
        if isinstance(step, Mkdir):
            local(step.path).mkdir(parents=True, exist_ok=True)
            os.chmod(local(step.path), step.mode)
        elif isinstance(step, Upload):
            dst = local(step.dst)
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(step.src, dst)
            except OSError:
                shutil.copyfile(step.src, dst)
            os.chmod(dst, step.mode)
        elif isinstance(step, WriteFile):
            if step.dst in skip:
                continue
            dst = local(step.dst)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(step.content)
            os.chmod(dst, step.mode)
        elif isinstance(step, Symlink):
            link = local(step.link)
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            os.symlink(step.target, link)


def _pick_port(engine: DockerEngine, base: str, dep_id: str, existing: dict[str, Any] | None,
               inputs: CapsuleInputs) -> int:
    if existing and existing.get("service_port"):
        return int(existing["service_port"])
    status, out = engine.run_once(base, ["/bin/sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"],
                                  {"network_mode": "host"}, timeout=60)
    busy = listening_ports(out)
    if inputs.internal_port:
        if int(inputs.internal_port) in busy:
            raise MurError("E-DEPLOY-007", f"network.internal_port {inputs.internal_port} is already in use on the Docker host")
        return int(inputs.internal_port)
    return pick_port(dep_id, busy)


def _build(engine: DockerEngine, req: DeployRequest, inputs: CapsuleInputs, dep_id: str, port: int,
           runtime: bundles.Bundle, progress: Progress) -> tuple[str, Any]:
    """Build (or reuse) the capsule image of this release; returns (tag, plan)."""
    svc = ServiceConfig(port=port, bind="0.0.0.0" if req.publish else "127.0.0.1", restart=inputs.restart_policy,
                        init="supervisor", memory_bytes=inputs.service_memory_bytes, tasks_max=inputs.service_tasks_max,
                        env=tuple(sorted(inputs.env.items())), run_args=inputs.run_args)
    from mur.deploy.service import precompiled_components

    compiled = precompiled_components(req, inputs, runtime.platform, progress)
    rin = ReleaseInputs(dep_id=dep_id, home=HOME, n=1, precompiled=compiled,
                        bundle=BundleRef(runtime.name, str(runtime.path), runtime.sha256, runtime.version, runtime.size),
                        manifest=inputs.manifest, files=inputs.files, workdir=inputs.workdir, artifacts=inputs.artifacts,
                        service=svc, capsule_name=inputs.name, capsule_version=inputs.version)
    plan = plan_release(rin)
    # The image holds the capsule, the runtime and the service settings, never the env file: an env
    # change reuses the image and only replaces the container.
    tag = image_tag(dep_id, _image_key(plan))
    if engine.has_image(tag):
        return tag, plan
    with progress.step(f"build image {tag}"), tempfile.TemporaryDirectory(prefix="mur-ctx-",
                                                                         dir=str(runtime.path.parent)) as tmp:
        ctx = Path(tmp)
        materialise(list(plan.prepare) + [Symlink("releases/1", plan.layout.current)], ctx, {f"{plan.release_dir}/env"})
        (ctx / "Dockerfile").write_text(CAPSULE_DOCKERFILE)
        (ctx / "mur-entrypoint").write_text(ENTRYPOINT)
        os.chmod(ctx / "mur-entrypoint", 0o755)
        engine.build(ctx, tag, req.base_image, {LABEL: dep_id, "dev.mur.digest": plan.digest})
    return tag, plan


def _image_key(plan) -> str:
    import hashlib
    import json

    body = json.dumps({"capsule": plan.capsule_digest, "bundle": plan.release_meta["bundle_sha256"],
                       "spec": plan.service_spec}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _preflight(engine: DockerEngine, req: DeployRequest, inputs: CapsuleInputs, image: str,
               runtime: bundles.Bundle, kwargs: dict[str, Any], info: dict[str, Any]) -> Report:
    report = Report(engine.label, "docker")
    report.facts.update({"platform": _platform(info), "init": "supervisor (container main process, tini as PID 1)",
                         "engine_cgroup": f"v{info.get('CgroupVersion', '?')} {info.get('CgroupDriver', '')}".strip(),
                         "kernel": info.get("KernelVersion"), "base_image": req.base_image})
    lay = Layout(HOME, "probe")
    bundle = lay.bundle(runtime.name)
    script = f"{bundle} --version; {bundle} probe --json"
    status, out = engine.run_once(image, ["/bin/sh", "-c", script], kwargs, timeout=300)
    lines = out.strip().splitlines()
    got = parse_version(lines[0]) if lines else ""
    report.facts["runtime"] = {"version": got, "pinned": runtime.version, "sha256": runtime.sha256}
    report.add("runtime", got == runtime.version, f"{runtime.name} reports {got or '(nothing)'}; pinned {runtime.version}")
    if status != 0:
        report.add("probe", False, f"probe container exited {status}: {out.strip()[-400:]}")
        return report
    probe = parse_probe(out)
    report.probe = probe
    report.facts.update({k: probe.get(k) for k in ("landlock_abi", "seccomp", "cgroup_mode")})
    report.add("landlock", True, f"ABI {probe.get('landlock_abi')} inside the container (kernel {probe.get('kernel')})",
               fatal=False)
    report.add("seccomp", True, "available" if probe.get("seccomp") else "unavailable", fatal=False)
    delegated = bool(probe.get("cgroup_delegated"))
    report.facts["cgroup_sessions"] = delegated
    report.add("cgroup", delegated or not inputs.needs_subprocess,
               f"{probe.get('cgroup_mode')} in a private cgroup namespace; sub-cgroups "
               + ("can be created (remounted rw)" if delegated else "cannot be created"),
               fatal=inputs.needs_subprocess)
    containment_check(report, inputs, probe)
    return report


def _prepare(req: DeployRequest, inputs: CapsuleInputs, dep_id: str, existing: dict[str, Any] | None,
             progress: Progress):
    engine = DockerEngine()
    info = engine.info()
    if not engine.has_image(req.base_image):
        raise MurError("E-DEPLOY-010", f"base image {req.base_image} is not present in the engine",
                       "build it with images/build-base.sh (no registry is used)")
    plat = _platform(info)
    pin = inputs.mur_version or __version__
    with progress.step(f"mur {pin} runtime for {plat}"):
        if req.mur_binary:
            runtime = bundles.use_explicit_bundle(req.mur_binary, pin)
        else:
            runtime = bundles.resolve_bundle(pin, plat, req.release_source or bundles.configured_release_source(),
                                             progress.note)
    port = _pick_port(engine, req.base_image, dep_id, existing, inputs)
    tag, plan = _build(engine, req, inputs, dep_id, port, runtime, progress)
    kwargs = engine.run_kwargs(seccomp_profile=req.seccomp_profile, apparmor=_apparmor(info))
    with progress.step("preflight (probe container)"):
        report = _preflight(engine, req, inputs, tag, runtime, kwargs, info)
    return engine, runtime, port, tag, plan, kwargs, report


def docker_check(req: DeployRequest, inputs: CapsuleInputs, progress: Progress) -> Report:
    from mur.deploy.service import find_existing
    from mur.deploy.state import new_deployment_id

    existing = find_existing(DeploymentStore(), req)
    dep_id = existing["deployment_id"] if existing else new_deployment_id()
    engine, *_rest, report = _prepare(req, inputs, dep_id, existing, progress)
    if existing is None:  # the probe image of a deployment that does not exist: leave nothing behind
        try:
            engine.remove_images(image_tag(dep_id, "x").split(":")[0])
        except MurError:
            pass
    return report


def _command(lay: Layout) -> list[str]:
    return [f"{lay.current}/mur", "supervise", "--foreground", "--log-stdout", "--spec", f"{lay.current}/service.json"]


def _env_files(plan) -> dict[str, tuple[bytes, int]]:
    env = next(s for s in plan.prepare if isinstance(s, WriteFile) and s.dst.endswith("/env"))
    return {env.dst: (env.content, 0o600)}


def _wait(engine: DockerEngine, name: str, lay: Layout, port: int, timeout: float) -> dict[str, Any]:
    """Container running, supervisor reports the startup line, agent card answers."""
    deadline = time.monotonic() + timeout
    target = ContainerTarget(engine, name)
    while True:
        c = engine.container(name)
        if c is None or c.status in ("exited", "dead"):
            return {"ok": False, "error": f"container {name} is {c.status if c else 'gone'}"}
        try:
            st = service_state(target, lay, "supervisor") if c.status == "running" else {}
            if st.get("ready"):
                card = agent_card_on_target(target, lay, port, wait=min(15.0, max(1.0, deadline - time.monotonic())))
                if card.get("ok"):
                    return card
            elif int(st.get("restarts") or 0) > 0 or st.get("state") in ("dead", "exited"):
                return {"ok": False, "error": f"the service exited during startup (state {st.get('state')})"}
        except MurError:
            pass
        if time.monotonic() >= deadline:
            return {"ok": False, "error": f"the service was not ready within {timeout:.0f}s"}
        time.sleep(0.5)


def _rename(engine: DockerEngine, old: str, new: str) -> None:
    c = engine.container(old)
    if c is not None:
        try:
            c.rename(new)
        except Exception as exc:  # noqa: BLE001
            raise MurError("E-DEPLOY-010", f"docker: rename {old} -> {new} failed: {exc}") from exc


def docker_deploy(req: DeployRequest, inputs: CapsuleInputs, dep_id: str, existing: dict[str, Any] | None,
                  store: DeploymentStore, progress: Progress, t0: float) -> dict[str, Any]:
    engine, runtime, port, tag, plan, kwargs, report = _prepare(req, inputs, dep_id, existing, progress)
    report.raise_if_failed()
    lay = plan.layout
    name, prev_name = container_name(dep_id), container_name(dep_id) + "-prev"
    labels = {LABEL: dep_id}
    url = f"http://127.0.0.1:{port}"
    current = engine.container(name)
    current_release = (current.labels or {}).get(RELEASE_LABEL) if current is not None else None
    labels[RELEASE_LABEL] = plan.digest
    if current is not None and current_release == plan.digest and current.status == "running":
        card = _wait(engine, name, lay, port, 10)
        if card.get("ok"):
            rec = _record(existing, dep_id, req, inputs, tag, tag, port, url, runtime, plan, unchanged=True)
            store.upsert(rec)
            return _result(rec, unchanged=True, elapsed=time.monotonic() - t0, agent_card=card.get("agent_card"))
    changed = current is not None and current_release != plan.digest
    if changed and current.status == "running":
        with progress.step("smoke-start the new release beside the serving container"):
            _smoke(engine, tag, dep_id, kwargs, plan, port, req.start_timeout)
    with progress.step(f"start container {name}"):
        if current is not None:
            if changed:
                engine.remove(prev_name)
                engine.stop(name)
                _rename(engine, name, prev_name)
            else:
                engine.remove(name)
        engine.create(tag, name, _command(lay), kwargs, labels, _env_files(plan))
        card = _wait(engine, name, lay, port, req.start_timeout)
        if not card.get("ok"):
            log = engine.logs(name, tail=40)
            engine.remove(name)
            if changed:
                _rename(engine, prev_name, name)
                c = engine.container(name)
                if c is not None:
                    c.start()
            raise MurError("E-DEPLOY-004", f"the capsule did not start in {name}: {card.get('error')}\nlogs:\n{log[-2500:]}",
                           "the previous container is serving again" if changed else "nothing is left running")
    _prune_images(engine, dep_id, {tag} | _prev_image(engine, prev_name))
    previous = existing.get("release") if existing and changed else (existing or {}).get("previous")
    rec = _record(existing, dep_id, req, inputs, tag, tag, port, url, runtime, plan, previous=previous)
    store.upsert(rec)
    return _result(rec, unchanged=False, elapsed=time.monotonic() - t0, agent_card=card.get("agent_card"))


def _prev_image(engine: DockerEngine, prev_name: str) -> set[str]:
    c = engine.container(prev_name)
    return set(c.image.tags) if c is not None else set()


def _prune_images(engine: DockerEngine, dep_id: str, keep: set[str]) -> None:
    repo = image_tag(dep_id, "x").split(":")[0]
    try:
        for img in engine.client.images.list(name=repo):
            if not set(img.tags) & keep:
                engine.client.images.remove(img.id, force=False)
    except Exception:  # noqa: BLE001 - pruning is best-effort
        pass


def _smoke(engine: DockerEngine, tag: str, dep_id: str, kwargs: dict[str, Any], plan, port: int, timeout: float) -> None:
    import json

    lay = plan.layout
    rel = plan.release_dir
    spare = pick_port(dep_id, {port}, salt=1)
    name = container_name(dep_id, candidate=True)
    engine.remove(name)
    c = engine.create(tag, name, [f"{rel}/mur", "supervise", "--smoke", "--spec", f"{rel}/service.json",
                                  "--release-dir", rel, "--port", str(spare), "--timeout", str(int(timeout))],
                      {**kwargs}, {LABEL: dep_id}, _env_files(plan), restart=False)
    try:
        c.wait(timeout=timeout + 60)
        out = c.logs(stdout=True, stderr=False).decode("utf-8", "replace")
    finally:
        engine.remove(name)
    try:
        res = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        res = {"ok": False, "error": out[-800:]}
    if not res.get("ok"):
        raise MurError("E-DEPLOY-004", f"the new image did not start: {res.get('error')}\nstderr:\n"
                       f"{(res.get('stderr') or '').strip()[-1500:]}", "the serving container was not touched")
    del lay


def _record(existing: dict[str, Any] | None, dep_id: str, req: DeployRequest, inputs: CapsuleInputs, tag: str,
            image: str | None, port: int, url: str, runtime: bundles.Bundle, plan, unchanged: bool = False,
            previous: dict[str, Any] | None = None) -> dict[str, Any]:
    old = existing or {}
    release = {**plan.release_meta, "image": tag}
    if unchanged:
        release, previous = old.get("release") or release, old.get("previous")
    return {
        "deployment_id": dep_id, "provider": "docker", "provider_vm_id": container_name(dep_id), "region": "",
        "ip": "127.0.0.1", "url": url, "manifest_path": str(inputs.manifest_path),
        "started_at": old.get("started_at") or now_rfc3339(), "updated_at": now_rfc3339(), "status": "running",
        "name": inputs.name, "version": inputs.version, "target": {"provider": "docker"}, "home": HOME,
        "init": "supervisor", "service_port": port, "bind": "0.0.0.0" if req.publish else "127.0.0.1",
        "container": container_name(dep_id), "image": tag, "tunnel": None, "release": release,
        "previous": previous, "bundles": [runtime.name], "artifacts": [[a.name, a.version] for a in inputs.artifacts],
        "mur_version": runtime.version,
    }


def _result(rec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    out = {k: rec.get(k) for k in ("deployment_id", "provider", "name", "version", "url", "status", "container", "image",
                                   "service_port", "mur_version")}
    out.update(extra)
    out["uploaded"] = 0 if extra.get("unchanged") else None
    if isinstance(out.get("elapsed"), float):
        out["elapsed"] = round(out["elapsed"], 2)
    return out


# --- lifecycle ----------------------------------------------------------------------------------


def docker_status(rec: dict[str, Any], store: DeploymentStore) -> dict[str, Any]:
    engine = DockerEngine()
    name = rec.get("container") or container_name(rec["deployment_id"])
    c = engine.container(name)
    lay = Layout(HOME, rec["deployment_id"])
    state: dict[str, Any] = {"state": c.status if c else "absent", "restarts": c.attrs.get("RestartCount") if c else None}
    card: dict[str, Any] = {"ok": False, "error": "container not running"}
    if c is not None and c.status == "running":
        target = ContainerTarget(engine, name)
        state["supervisor"] = service_state(target, lay, "supervisor")
        card = agent_card_on_target(target, lay, int(rec["service_port"]), wait=3)
    observed = "running" if card.get("ok") else ("stopped" if c is not None and c.status == "exited"
                                                 and rec.get("status") == "stopped" else "failed")
    store.update(rec["deployment_id"], status=observed)
    return {"deployment_id": rec["deployment_id"], "provider": "docker", "name": rec.get("name"), "url": rec.get("url"),
            "container": name, "image": rec.get("image"), "status": observed, "service": state,
            "agent_card_ok": bool(card.get("ok")), "agent_card": card.get("agent_card"),
            "release": (rec.get("release") or {}).get("image"), "previous": (rec.get("previous") or {}).get("image")}


def docker_logs(rec: dict[str, Any], lines: int, follow: bool, sink: Callable[[bytes], None] | None) -> str:
    return DockerEngine().logs(rec.get("container") or container_name(rec["deployment_id"]), lines, follow, sink)


def docker_stop(rec: dict[str, Any], store: DeploymentStore, progress: Progress) -> dict[str, Any]:
    engine = DockerEngine()
    with progress.step(f"stop {rec['container']}"):
        engine.stop(rec["container"])
    store.update(rec["deployment_id"], status="stopped", updated_at=now_rfc3339())
    c = engine.container(rec["container"])
    return {"deployment_id": rec["deployment_id"], "status": "stopped", "service": {"state": c.status if c else "absent"}}


def docker_start(rec: dict[str, Any], store: DeploymentStore, progress: Progress, timeout: float) -> dict[str, Any]:
    engine = DockerEngine()
    c = engine.container(rec["container"])
    if c is None:
        raise MurError("E-DEPLOY-010", f"container {rec['container']} does not exist", "deploy again")
    with progress.step(f"start {rec['container']}"):
        c.start()
        card = _wait(engine, rec["container"], Layout(HOME, rec["deployment_id"]), int(rec["service_port"]), timeout)
    if not card.get("ok"):
        raise MurError("E-DEPLOY-004", f"the capsule did not start: {card.get('error')}\nlogs:\n"
                       f"{engine.logs(rec['container'], 40)[-2500:]}")
    store.update(rec["deployment_id"], status="running", updated_at=now_rfc3339())
    return {"deployment_id": rec["deployment_id"], "status": "running", "url": rec.get("url")}


def docker_destroy(rec: dict[str, Any], store: DeploymentStore, progress: Progress, force: bool) -> dict[str, Any]:
    dep_id = rec["deployment_id"]
    try:
        engine = DockerEngine()
        with progress.step(f"destroy {rec.get('container')}"):
            for name in (container_name(dep_id), container_name(dep_id) + "-prev", container_name(dep_id, True)):
                engine.remove(name)
            removed = engine.remove_images(image_tag(dep_id, "x").split(":")[0])
    except MurError:
        if not force:
            raise
        removed = []
    store.remove(dep_id)
    return {"deployment_id": dep_id, "status": "destroyed", "images_removed": removed}


def docker_rollback(rec: dict[str, Any], store: DeploymentStore, progress: Progress, timeout: float) -> dict[str, Any]:
    engine = DockerEngine()
    dep_id = rec["deployment_id"]
    name, prev_name, tmp_name = container_name(dep_id), container_name(dep_id) + "-prev", container_name(dep_id) + "-swap"
    if engine.container(prev_name) is None:
        raise MurError("E-DEPLOY-011", f"the previous container {prev_name} is gone")
    t0 = time.monotonic()
    lay = Layout(HOME, dep_id)
    with progress.step(f"switch to the previous container ({(rec.get('previous') or {}).get('image')})"):
        engine.stop(name)
        engine.remove(tmp_name)
        _rename(engine, name, tmp_name)
        _rename(engine, prev_name, name)
        engine.container(name).start()
        card = _wait(engine, name, lay, int(rec["service_port"]), timeout)
        if not card.get("ok"):
            log = engine.logs(name, 40)
            engine.stop(name)
            _rename(engine, name, prev_name)
            _rename(engine, tmp_name, name)
            engine.container(name).start()
            raise MurError("E-DEPLOY-004", f"the previous release did not start: {card.get('error')}\nlogs:\n{log[-2500:]}",
                           "switched back to the current release")
        _rename(engine, tmp_name, prev_name)
    store.update(dep_id, release=rec.get("previous"), previous=rec.get("release"), status="running",
                 image=(rec.get("previous") or {}).get("image"), updated_at=now_rfc3339())
    return {"deployment_id": dep_id, "status": "running", "release": (rec.get("previous") or {}).get("image"),
            "previous": (rec.get("release") or {}).get("image"), "url": rec.get("url"),
            "elapsed": round(time.monotonic() - t0, 2), "agent_card": card.get("agent_card")}
