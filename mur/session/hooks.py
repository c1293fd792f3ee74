"""Hook artifacts (`runtime: hook`): lifecycle observers and the few decisions they may commit.

`build_hooks(tools, trace, loaded, wd)` is the one entry point the session runtime calls after
staging; it returns a :class:`HookSet` (None when the capsule declares no hook):

* `on_event(event)` — a trace listener. Each trace event that has a lifecycle function
  (mur.session.hookrecords) is dispatched to every hook bound to it, in manifest declaration order:
  blocking hooks inline, async hooks onto their worker's bounded queue (full queue: the event is
  dropped, logged, and traced as `hook_dispatch_error` with arm `queue-overflow`).
* `compactor()` — for `run_agent_loop(compactor=)` when a blocking hook can commit
  `replace-context`; a hook `Err` (or trap) at on-compaction fails the session (upstream's rule).
* `on_task_end(outcome)` — for `run_task_with_reopens(on_task_end=)`: the first `reopen-task`.
* `agent_loop(...)` — `run_agent_loop` with both of the above wired in (a drop-in replacement).
* `on_stage(shell_allow)` — on-stage hooks' `write-manifests`, written to tools/<bin>/murmur.yaml.
* `close()` — drains async queues within a bounded budget (`drain` / `timeout` faults).

A hook `Err`, trap or limit never aborts the loop (except at on-compaction): the message is appended
to `<session workdir>/logs/hook-<name>.log` and a `hook_dispatch_error {hook_name, event, arm}` trace
event is written (arm `error`, or the unsupported arm's name). Hooks run default-deny (grants from
the capsule manifest only, mur.manifest.grants): no preopen unless `filesystem.scope`, an empty HTTP
allow list unless `network.allow`. Their environment is only the runtime's MURMUR_* variables.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.session.hookconfig import HookConfig, read_hook_config
from mur.session.hookinstance import HookInstance, HookLog
from mur.session.hookset import DRAIN_TIMEOUT, QUEUE_DEPTH, CallResult, Hook, HookSet, _Worker

__all__ = ["build_hooks", "hook_env", "Hook", "HookSet", "CallResult"]


def hook_env(loaded: Any, murmur_vars: dict[str, str], host_env: dict[str, str] | None = None) -> dict[str, str]:
    """The MURMUR_* variables every hook sees (spec "Hook WASI environment variables")."""
    from mur.inference.driver import driver_env

    capsule = loaded.capsule
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


def _hook_config(tool: Any) -> HookConfig:
    return read_hook_config(Path(tool.dir) / "murmur.yaml", f"tools/{tool.name}/murmur.yaml")


def _driver_client(tools: Any, loaded: Any) -> Any:
    inf = loaded.capsule.inference
    if inf is None or inf.transport != "http" or not inf.driver_artifact:
        return None
    driver = tools.staged.tools.get(inf.driver_artifact)
    if driver is None or driver.wasm_path is None:
        return None
    from mur.inference.driver import DriverModelClient
    from mur.wasm.types import ToolInput

    cfg = tools.guest_config(driver)
    return DriverModelClient(lambda payload: tools.host.call_tool(cfg, ToolInput(data=payload), kind="driver"))


def build_hooks(tools: Any, trace: Any, loaded: Any, wd: Any, *, model_client: Any = None,
                on_artifact: Callable[[str, str], None] | None = None, queue_depth: int = QUEUE_DEPTH,
                drain_timeout: float = DRAIN_TIMEOUT, http_transport: Any = None) -> HookSet | None:
    """The session's HookSet (None without hook artifacts); validates each hook's contract
    (E-MAN-003) and instantiates every hook (E-RUN-001/002 fail the launch)."""
    from mur.wasm.env import guest_env
    from mur.wasm.host import GuestConfig

    staged = tools.staged
    order = [a.name for a in loaded.capsule.artifacts if a.runtime == "hook"]
    staged_hooks = sorted(staged.by_role("hook"), key=lambda t: order.index(t.name) if t.name in order else len(order))
    if not staged_hooks:
        return None
    configs = [(tool, _hook_config(tool)) for tool in staged_hooks]  # every contract checked before any instance
    settings = tools.settings
    if model_client is None:
        model_client = _driver_client(tools, loaded)
    inf = loaded.capsule.inference
    hookset = HookSet([], emit=trace.write, tools_dir=wd.tools, model_client=model_client,
                      default_model=inf.model if inf is not None else None, on_artifact=on_artifact,
                      queue_depth=queue_depth, drain_timeout=drain_timeout, staged=staged)
    base_vars = hook_env(loaded, dict(settings.murmur_vars))
    hooks: list[Hook] = []
    try:
        for tool, config in configs:
            if tool.kind != "wasm" or tool.wasm_path is None:
                raise MurError("E-RUN-008", f"hook '{tool.name}' has no WASM component to run",
                               "a hook artifact ships one .wasm built against the `hook` world")
            grant = settings.grants.get(tool.name)
            preopen = None
            if grant is not None and grant.preopen == "scope" and grant.scope:
                try:
                    preopen = tools.preopen_dir(grant.scope)
                except OSError as exc:
                    raise MurError("E-IO-003", f"cannot create hook '{tool.name}' scope {grant.scope}: {exc}") from exc
            env = guest_env([], [], os.environ, {**base_vars, "MURMUR_HOOK_NAME": tool.name})
            log = HookLog(Path(wd.logs) / f"hook-{tool.name}.log")
            cfg = GuestConfig(wasm_path=tool.wasm_path, label=tool.name, preopen=preopen, env=env,
                              limits=settings.limits, http_allow=list(grant.network or []) if grant else [],
                              on_http=_denied_recorder(hookset, tool.name), http_transport=http_transport)
            instance = HookInstance(tools.host.engine, cfg, log, hookset.inference_for(tool.name))
            hooks.append(Hook(tool.name, config, instance, log))
            instance.start()
    except BaseException:
        for hook in hooks:
            hook.instance.close()
        raise
    hookset.hooks = hooks
    for hook in hooks:
        if hook.config.is_async:
            hook.worker = _Worker(hookset, hook, queue_depth)
    return hookset


def _denied_recorder(hookset: HookSet, name: str) -> Callable[[dict], None]:
    def record(info: dict) -> None:
        if not info.get("allowed", True):
            hookset._trace({"event_type": "network_denied", "turn": hookset.turn, "artifact": name,
                            "url": info.get("url"), "method": info.get("method"),
                            "reason": info.get("error") or "not in this hook's capabilities.network.allow"})

    return record
