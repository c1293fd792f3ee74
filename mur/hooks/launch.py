"""The session's hooks at launch: contracts checked, components instantiated, one HookSet returned.

`build_hooks` takes plain data — the staged hook artifacts, the capsule manifest, the session's
shared guest settings (grants, limits, MURMUR_* variables), the wasm engine and the trace's `emit`
— never the session's own objects; mur.session.hookwiring derives that data from a staged session.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.hooks.config import HookConfig, read_hook_config
from mur.hooks.hookset import DRAIN_TIMEOUT, QUEUE_DEPTH, Hook, HookSet, OnManifest
from mur.hooks.instance import HookInstance, HookLog


@dataclass(frozen=True)
class HookArtifact:
    """One staged hook artifact: its name, component and its own murmur.yaml (tools/<name>/)."""

    name: str
    kind: str  # "wasm" for a runnable hook; anything else is E-RUN-008
    wasm_path: Path | None
    manifest: Path


def hook_env(capsule: Any, murmur_vars: dict[str, str], host_env: dict[str, str] | None = None) -> dict[str, str]:
    """The MURMUR_* variables every hook sees (spec "Hook WASI environment variables")."""
    from mur.inference.driver import driver_env

    env_in = os.environ if host_env is None else host_env
    out = dict(murmur_vars)
    otel = capsule.observability.otel_endpoint
    if otel:
        out["MURMUR_OTEL_ENDPOINT"] = otel
    if env_in.get("MURMUR_FORMATION_ID"):
        out["MURMUR_FORMATION_ID"] = env_in["MURMUR_FORMATION_ID"]
    evaluation = capsule.observability.eval
    if evaluation is not None and evaluation.scorers:
        out["MURMUR_EVAL_CONFIG"] = json.dumps(evaluation.model_dump(exclude_none=True), separators=(",", ":"))
    dataset = env_in.get("MURMUR_DATASET_ID") or (evaluation.dataset_id if evaluation is not None else None)
    if dataset:
        out["MURMUR_DATASET_ID"] = dataset
    if env_in.get("MURMUR_CASE_ID"):
        out["MURMUR_CASE_ID"] = env_in["MURMUR_CASE_ID"]
    # The inference config, but never the API key: a hook reaches the model through run-inference.
    out.update(driver_env(capsule.inference, None))
    return out


def build_hooks(artifacts: list[HookArtifact], capsule: Any, *, engine: Any, emit: Callable[[dict], None],
                murmur_vars: dict[str, str], grants: dict[str, Any], preopen_dir: Callable[[str], Path | None], limits: Any,
                logs_dir: Path, tools_dir: Path, model_client: Any = None,
                on_artifact: Callable[[str, str], None] | None = None, on_manifest: OnManifest | None = None,
                queue_depth: int = QUEUE_DEPTH, drain_timeout: float = DRAIN_TIMEOUT,
                http_transport: Any = None) -> HookSet | None:
    """The session's HookSet (None without hook artifacts), hooks in manifest declaration order.

    Every hook's contract is validated first (E-MAN-003), then every hook is instantiated
    (E-RUN-001/002 fail the launch; the ones already started are closed again)."""
    from mur.wasm.env import guest_env
    from mur.wasm.host import GuestConfig

    order = [a.name for a in capsule.artifacts if a.runtime == "hook"]
    artifacts = sorted(artifacts, key=lambda t: order.index(t.name) if t.name in order else len(order))
    if not artifacts:
        return None
    configs: list[tuple[HookArtifact, HookConfig]] = [
        (art, read_hook_config(art.manifest, f"tools/{art.name}/murmur.yaml")) for art in artifacts
    ]
    inf = capsule.inference
    hookset = HookSet([], emit=emit, tools_dir=tools_dir, model_client=model_client,
                      default_model=inf.model if inf is not None else None, on_artifact=on_artifact,
                      queue_depth=queue_depth, drain_timeout=drain_timeout, on_manifest=on_manifest)
    base_vars = hook_env(capsule, dict(murmur_vars))
    hooks: list[Hook] = []
    try:
        for art, config in configs:
            if art.kind != "wasm" or art.wasm_path is None:
                raise MurError("E-RUN-008", f"hook '{art.name}' has no WASM component to run",
                               "a hook artifact ships one .wasm built against the `hook` world")
            grant = grants.get(art.name)
            preopen = None
            if grant is not None and grant.preopen == "scope" and grant.scope:
                try:  # created beneath the tools' workdir without following a link (the session's own helper)
                    preopen = preopen_dir(grant.scope)
                except OSError as exc:
                    raise MurError("E-IO-003", f"cannot create hook '{art.name}' scope {grant.scope}: {exc}") from exc
            env = guest_env([], [], os.environ, {**base_vars, "MURMUR_HOOK_NAME": art.name})
            log = HookLog(Path(logs_dir) / f"hook-{art.name}.log")
            cfg = GuestConfig(wasm_path=art.wasm_path, label=art.name, preopen=preopen, env=env, limits=limits,
                              http_allow=list(grant.network or []) if grant else [],
                              on_http=hookset.http_recorder(art.name), http_transport=http_transport)
            instance = HookInstance(engine, cfg, log, hookset.inference_for(art.name))
            hooks.append(Hook(art.name, config, instance, log))
            instance.start()
    except BaseException:
        for hook in hooks:
            hook.instance.close()
        raise
    for hook in hooks:  # workers start only once every hook is up
        hookset.add(hook)
    return hookset
