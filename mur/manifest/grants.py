"""Per-artifact capability grants: what each tool, driver and hook may actually reach.

Two baselines (spec "Hook capabilities", "Tool and driver capabilities"):
  * hook: default-deny. No block = no network and no preopened directory at all.
  * tool / driver: inherit-and-clamp. No block = the capsule-wide ceiling; a declared block can only
    narrow it: network = declaration ∩ ceiling (dropped entries warn W-SEC-007), filesystem.scope =
    a subtree of the workdir.
Only the capsule operator grants: these come from the capsule manifest's artifact entries, never from
an artifact's own bundled murmur.yaml. Keys other than network/filesystem are inert per artifact and
warn (W-SEC-006 on hooks, W-SEC-008 on tools/drivers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mur.manifest.capsule import Capabilities, Capsule
from mur.manifest.network import AllowEntry, narrow, parse_allow_list

INERT_KEYS = ("shell", "spawn", "env", "limits", "resources", "containment")


@dataclass
class ArtifactGrant:
    """The effective grant of one executing artifact (tool, driver or hook)."""

    name: str
    role: str
    network: list[AllowEntry] | None  # None = the capsule-wide ceiling (tools/drivers only)
    scope: str | None  # relative subtree preopened as "."; None = see `preopen`
    preopen: str  # "workdir" | "scope" | "none"
    dropped: list[str] = field(default_factory=list)
    declared: bool = False

    def effective_network(self, ceiling: list[AllowEntry]) -> list[AllowEntry]:
        """The allow list this artifact's outbound HTTP is checked against."""
        return list(ceiling) if self.network is None else list(self.network)


def resolve_grants(
    capsule: Capsule, ceiling: list[AllowEntry]
) -> tuple[dict[str, ArtifactGrant], list[tuple[str, str]]]:
    """Compute every tool/driver/hook grant (E-CAP-001/002 on bad entries) plus staging warnings."""
    from mur.manifest.rules import check_scope

    grants: dict[str, ArtifactGrant] = {}
    warnings: list[tuple[str, str]] = []
    for art in capsule.artifacts:
        if art.runtime not in ("tool", "driver", "hook"):
            continue
        caps: Capabilities | None = art.capabilities
        declared = caps.model_fields_set if caps is not None else set()
        scope = None
        if caps is not None and caps.filesystem.scope is not None:
            scope = check_scope(caps.filesystem.scope.strip())
        if art.runtime == "hook":
            network = parse_allow_list(caps.network.allow) if caps is not None else []
            grant = ArtifactGrant(art.name, "hook", network, scope, "scope" if scope else "none", declared=caps is not None)
            code, what = "W-SEC-006", "only network and filesystem govern a hook; it is a capsule-wide concern"
        else:
            network = None
            dropped: list[str] = []
            if caps is not None and "network" in declared and "allow" in caps.network.model_fields_set:
                wanted = parse_allow_list(caps.network.allow)
                kept, lost = narrow(wanted, ceiling)
                network, dropped = kept, [e.raw for e in lost]
                for entry in dropped:
                    warnings.append(
                        (
                            "W-SEC-007",
                            f"artifact '{art.name}': network.allow entry '{entry}' is outside the capsule-wide "
                            "capabilities.network.allow ceiling and was dropped (narrowing only ever subtracts)",
                        )
                    )
            grant = ArtifactGrant(
                art.name, art.runtime, network, scope, "scope" if scope else "workdir", dropped, caps is not None
            )
            code, what = "W-SEC-008", "only network and filesystem narrow a tool or driver"
        for key in INERT_KEYS:
            if key in declared:
                warnings.append(
                    (
                        code,
                        f"artifact '{art.name}' (runtime: {art.runtime}) declares capabilities.{key}, which is "
                        f"inert per artifact: {what}",
                    )
                )
        grants[art.name] = grant
    if capsule.capabilities.filesystem.workdir_exec:
        warnings.append(
            (
                "W-SEC-011",
                "capabilities.filesystem.workdir_exec: true keeps the Execute right on the session workdir: "
                "anything the capsule writes there can run regardless of capabilities.shell.allow, so the "
                "allowlist is advisory and the achieved containment class is capped at advisory",
            )
        )
    shell = capsule.capabilities.shell
    for grant in shell.interpreter_runtime if shell else []:
        dirs = ", ".join(f"{d.path}{' (list_dir)' if d.list_dir else ''}" for d in grant.dirs)
        warnings.append(
            (
                "W-SEC-009",
                f"capabilities.shell.interpreter_runtime grants '{grant.binary}' access to host paths outside "
                f"the workdir ({dirs}); this couples the capsule to this host's interpreter layout",
            )
        )
    return grants, warnings


def native_grant_warning(grant: ArtifactGrant) -> tuple[str, str] | None:
    """W-SEC-008 for a declared per-artifact block on a tool whose own manifest says
    `implementation: native`: a native tool never runs through the WASI path the grant narrows.
    Staging calls this once the artifact's own manifest is known (after resolution)."""
    if not grant.declared or grant.role == "hook":
        return None
    return (
        "W-SEC-008",
        f"artifact '{grant.name}' (runtime: {grant.role}) declares a per-artifact capabilities: block, but "
        "its implementation is native: per-artifact grants only narrow the WASI tool path, so this block "
        "has no effect",
    )
