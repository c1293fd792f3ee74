"""What `mur run --explain-scope` reports and what `session_start.effective_grants` records: one flat
object, the same shape in both places. The manifest's grants beside what this host's kernel will
enforce: the containment class (mur.manifest.containment) and the sandbox policy the session gets
(mur.sandbox.decide: the same decision `mur run` applies; explain decides it from the facts it can
gather without side effects, a session records the one it applied). Its human text is
mur.sandbox.scope_text, which imports nothing heavy.

Keys, in order: upstream's ``declared_containment, achieved_containment, floor_met,
shortfall_reason (only when the floor is unmet), enforcement_tier, filesystem_scope, workdir_exec,
network_allow, unix_sockets, shell_allow, spawn_allow, env_allow, interpreter_runtime_grants,
staged_runtime_grants``, with mur's own after ``declared_source``: ``sealed_blocker`` (why the host is
not sealed, null when it is), ``network_isolation``, ``process_isolation``, ``host_view``,
``host_view_reason``, ``disk_ceiling``, ``disk_ceiling_bytes``, ``disk_ceiling_inodes``,
``disk_ceiling_reason``.
"""

from __future__ import annotations

from typing import Any

from mur.manifest.capsule import Capsule
from mur.manifest.containment import (Floor, ProbeLike, achieved_class, shortfall_reason, subprocess_shortfall,
                                     view_shortfall)
from mur.manifest.network import parse_allow_list
from mur.sandbox.scope_text import render_scope_report

__all__ = ["effective_grants", "render_scope_report", "scope_report"]


def _interpreter_lines(caps: Any) -> list[str]:
    shell = caps.shell
    return [f"{g.binary}: {d.path}{' (list_dir)' if d.list_dir else ''}"
            for g in (shell.interpreter_runtime if shell else []) for d in g.dirs]


def _policy(capsule: Capsule, probe: ProbeLike) -> tuple[Any, Any]:
    """(the policy explain decides for this host, the disk plan of a capsule without subprocesses)."""
    from mur.sandbox.decide import decide, explain_facts, guest_disk

    caps = capsule.capabilities
    facts = explain_facts(probe)
    return decide(caps, parse_allow_list(list(caps.network.allow)), facts), guest_disk(caps, facts)


def effective_grants(capsule: Capsule, floor: Floor, probe: ProbeLike, applied: Any = None,
                     guest_disk: Any = None) -> dict[str, Any]:
    """The flat report. ``applied``: the ShellPolicy a session applied (its achieved guarantee);
    ``guest_disk``: the DiskPlan of a session without subprocesses. Without them: what explain decides."""
    caps = capsule.capabilities
    spawns = bool(caps.shell_allow or caps.spawn_allow)
    predicted, predicted_disk = _policy(capsule, probe) if applied is None else (applied, guest_disk)
    policy = applied if applied is not None else predicted
    disk = policy.disk if spawns else (guest_disk if guest_disk is not None else predicted_disk)
    workdir_exec = caps.filesystem.workdir_exec
    short = subprocess_shortfall(caps, probe)
    view_short = view_shortfall(caps)
    achieved = achieved_class(probe, workdir_exec, short, view_short)
    blocker = view_short or getattr(probe, "sealed_reason", None)
    if achieved == "sealed" and spawns and policy.view is None:  # the view was not built after all
        achieved, blocker = "scoped", policy.view_reason
    reason = shortfall_reason(floor.declared, achieved, workdir_exec, short, blocker)
    linux = getattr(probe, "os", "linux") == "linux" and getattr(probe, "tier", "full") != "environment-only"
    out: dict[str, Any] = {
        "declared_containment": floor.declared,
        "declared_source": floor.source,
        "achieved_containment": achieved,
        "floor_met": reason is None,
    }
    if reason is not None:
        out["shortfall_reason"] = reason
    out.update({
        "enforcement_tier": policy.mechanism if spawns and linux else probe.mechanism,
        "sealed_blocker": None if achieved == "sealed" else (blocker or "no kernel filesystem mediation here"),
        "network_isolation": policy.network.mechanism if linux else "unenforced",
        "process_isolation": policy.processes if linux else "unenforced",
        "host_view": policy.host_view if linux else "host",
        "host_view_reason": policy.view_reason if linux else "no kernel enforcement on this host",
        "disk_ceiling": disk.mechanism if disk is not None else "watcher",
        "disk_ceiling_bytes": caps.resources.workdir_max_bytes,
        "disk_ceiling_inodes": disk.inodes if disk is not None else None,
        "disk_ceiling_reason": disk.reason if disk is not None and linux else
        (None if disk is not None and disk.kernel else "no kernel enforcement on this host"),
        "filesystem_scope": caps.filesystem.scope,
        "workdir_exec": workdir_exec,
        "network_allow": list(caps.network.allow),
        "unix_sockets": caps.network.unix_sockets,
        "shell_allow": caps.shell_allow,
        "spawn_allow": caps.spawn_allow,
        "env_allow": list(caps.env.allow),
        "interpreter_runtime_grants": _interpreter_lines(caps),
        "staged_runtime_grants": [],
    })
    return out


def scope_report(capsule: Capsule, floor: Floor, probe: ProbeLike) -> dict[str, Any]:
    """The `--explain-scope --json` object: what a session started now would record as its
    `session_start.effective_grants` (the same function, the policy explain can decide)."""
    return effective_grants(capsule, floor, probe)
