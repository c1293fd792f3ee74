"""What a session tells the others, derived from its CheckedRun and what was staged: the agent card
the A2A door serves, the startup line, MURMUR.md's inventory, the settings every guest shares and
the components to compile before the startup line. Pure functions: mur.session.runner applies them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mur.session.reporter import Startup

if TYPE_CHECKING:
    from mur.hooks.hookset import HookSet
    from mur.session import murmur_md
    from mur.session.prechecks import CheckedRun
    from mur.session.staging import Staged
    from mur.session.tools import GuestSettings, SessionTools
    from mur.session.workdir import Workdir


def card(checked: CheckedRun, staged: Staged) -> dict[str, Any]:
    """The agent card's capabilities, once the tools are staged."""
    capsule = checked.capsule
    return {
        "name": capsule.name,
        "version": capsule.version,
        "capabilities": {
            "tools": [t.name for t in staged.by_role("tool")],
            "shell": bool(capsule.capabilities.shell_allow),
            "network": bool(capsule.capabilities.network.allow),
            "streaming": True,
        },
    }


def startup(checked: CheckedRun, url: str, session_id: str, wd: Workdir, staged: Staged) -> Startup:
    """The startup line's facts (deploy reads its JSON form)."""
    capsule = checked.capsule
    inf = capsule.inference
    driver = inf.driver_artifact if inf and inf.transport == "http" else (inf.effective_command if inf else None)
    return Startup(url=url, pid=os.getpid(), session_id=session_id, name=capsule.name, version=capsule.version,
                   workdir=wd.session, tools_workdir=wd.accessible, driver=driver,
                   skills=len(staged.by_role("skill")))


def inventory(checked: CheckedRun, session_id: str, url: str, tools: SessionTools,
              hooks: HookSet | None) -> murmur_md.Inventory:
    """MURMUR.md's facts: identity, model, budget, whether a hook can compact, tools, skills, shell."""
    from mur.session import murmur_md

    capsule = checked.capsule
    skills = []
    for t in tools.staged.by_role("skill"):
        first = next((ln.strip() for ln in (t.text or "").splitlines() if ln.strip()), "")
        skills.append(murmur_md.ToolEntry(t.name, t.version, t.kind, t.description or first))
    return murmur_md.Inventory(
        capsule.name, capsule.version, session_id, url,
        capsule.inference.model if capsule.inference else None,
        capsule.context.max_tokens,
        hooks is not None and hooks.compactor() is not None,
        tools=[murmur_md.ToolEntry(t.name, t.version, t.kind, t.description) for t in tools.visible()
               if t.role != "skill"],
        skills=skills,
        bound_skill=checked.prompts.bound_skill,
        shell_allow=list(capsule.capabilities.shell_allow),
    )


def guest_settings(checked: CheckedRun, session_id: str, url: str, wd: Workdir) -> GuestSettings:
    """What every guest of the session shares: env inputs, MURMUR_* variables, limits, grants."""
    from mur.session.tools import GuestSettings

    capsule = checked.capsule
    caps = capsule.capabilities
    murmur_vars = {
        "MURMUR_SESSION_ID": session_id,
        "MURMUR_CAPSULE_URL": url,
        "MURMUR_CAPSULE_NAME": capsule.name,
        "MURMUR_CAPSULE_VERSION": capsule.version,
    }
    if capsule.observability.otel_endpoint:
        murmur_vars["MURMUR_OTEL_ENDPOINT"] = capsule.observability.otel_endpoint
    extra: dict[str, dict[str, str]] = {}
    inf = capsule.inference
    if inf is not None and inf.transport == "http" and inf.driver_artifact:
        from mur.inference.driver import driver_env  # the inference stack: only when there is a driver

        extra[inf.driver_artifact] = driver_env(inf, checked.loaded.api_key)
    return GuestSettings(
        env_allow=list(caps.env.allow),
        strip_env=list(caps.shell.strip_env) if caps.shell else [],
        murmur_vars=murmur_vars,
        limits=caps.limits,
        ceiling=checked.loaded.network_allow,
        accessible=wd.accessible,
        capsule_scope=caps.filesystem.scope,
        grants=checked.loaded.grants,
        logs_dir=wd.logs,
        include_output=capsule.trace.include_tool_output,
        extra_vars=extra,
    )


def components(checked: CheckedRun, staged: Staged) -> list[tuple[Path, str, str]]:
    """Every component to compile (or load from the cache) before the startup line: (path, kind, name)."""
    wanted = [(tool.wasm_path, "driver" if tool.role == "driver" else "tool", tool.name)
              for tool in staged.tools.values() if tool.kind == "wasm" and tool.wasm_path is not None]
    if checked.capsule_wasm is not None:
        wanted.append((checked.capsule_wasm, "capsule", checked.capsule.name))
    return wanted
