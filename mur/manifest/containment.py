"""Containment classes: the floor a capsule declares versus the class this host achieves.

  * Declared floor: the strongest of `capabilities.containment` (manifest), `containment` in the config
    files, and `mur run --containment` — a CLI flag can raise the floor, never lower it. Nothing declared
    means `advisory`.
  * Achieved class: from the host probe only (a real Landlock ruleset applied in a forked child, see
    mur.sandbox.probe), never from the manifest: `sealed` where the probe also built and verified the
    tools' composed root (mount namespace + pivot_root: as root, or in an unprivileged user
    namespace the host allows; mur.sandbox.probeview), `scoped` on other Landlock-capable Linux hosts,
    else `advisory`. `capabilities.filesystem.workdir_exec: true` caps it at `advisory`.
  * `scoped` also means network.allow is carried by a private network namespace for a capsule that
    can spawn subprocesses and has network.allow: on a host that cannot create one the capsule
    achieves only `advisory` (its tools would reach any address on an allowed port), so a scoped
    floor is refused rather than silently degraded to Landlock's port rules. The same holds for a host
    where such a capsule's subprocesses would share mur's uid with nothing (session uid, pid namespace,
    Landlock signal scope) keeping them from other processes.
  * Refusal: E-CAP-003 before any registry pull, compile or workdir creation.
This module is pure: it takes the probe result as an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from mur.errors import MurError
from mur.manifest.config import CLASS_RANK

SCOPED_SHORTFALL = (
    "scoped requires Landlock filesystem mediation (Linux 5.13+ with a usable Landlock ABI); this host "
    "provides no kernel filesystem mediation, so paths outside the workdir are constrained by convention only"
)
SEALED_SHORTFALL = (
    "sealed requires mount-namespace + pivot_root isolation (the tools in a root built for the session), "
    "which this host cannot provide"
)


def sealed_shortfall(blocker: str | None) -> str:
    """Why this host is not sealed, naming the precise blocker the probe found."""
    return f"{SEALED_SHORTFALL}: {blocker}" if blocker else SEALED_SHORTFALL
WORKDIR_EXEC_SHORTFALL = (
    "capabilities.filesystem.workdir_exec: true keeps the Landlock Execute right on the session workdir, so a "
    "binary the capsule compiles, downloads or renames inside it runs regardless of capabilities.shell.allow — "
    "the allowlist stops being an enforceable property of this capsule. No host can back a class above "
    "advisory for it. Either remove workdir_exec or lower the declared containment floor to advisory"
)


NETWORK_SHORTFALL = (
    "scoped confines the network.allow of a capsule that spawns subprocesses to exactly its hosts, which needs "
    "a private network namespace (mur as root, or unprivileged user namespaces); this host cannot create one, "
    "so shell tools would reach every address on an allowed port"
)


PROCESS_SHORTFALL = (
    "scoped keeps the subprocesses of a capsule away from every process outside its session, which needs a uid of "
    "the session's own (mur as root), a pid namespace (unprivileged user namespaces) or Landlock's signal scoping "
    "(ABI 6+); this host provides none of them, so shell tools sharing mur's uid could signal mur and every other "
    "process of that uid"
)


UNIX_SOCKETS_VIEW = (
    "capabilities.network.unix_sockets: true asks for every unix socket the shell tools can reach on the host "
    "(a Docker socket, say), which a root built for the session would hide: its tools see the host's tree"
)


def view_shortfall(caps: Any) -> str | None:
    """Why this capsule's subprocesses cannot run in a composed root (sealed) on any host, or None."""
    spawns = bool(caps.shell_allow or caps.spawn_allow)
    return UNIX_SOCKETS_VIEW if spawns and caps.network.unix_sockets else None


class ProbeLike(Protocol):
    achieved: str
    mechanism: str
    tier: str


@dataclass(frozen=True)
class Floor:
    """The effective declared floor and which source supplied it."""

    declared: str
    source: str  # "manifest" | "config" | "cli" | "default"


def effective_floor(manifest: str | None, config: str | None, cli: str | None) -> Floor:
    """Strongest of the three sources; ties are credited to the first of manifest, config, cli."""
    best: Floor | None = None
    for source, value in (("manifest", manifest), ("config", config), ("cli", cli)):
        if value is None:
            continue
        if best is None or CLASS_RANK[value] > CLASS_RANK[best.declared]:
            best = Floor(value, source)
    return best or Floor("advisory", "default")


def network_shortfall(caps: Any, probe: ProbeLike) -> bool:
    """A Landlock host that cannot give subprocesses a network namespace, for a capsule whose
    subprocesses have network.allow (probes that do not measure it count as able: fakes, old targets)."""
    spawns = bool(caps.shell_allow or caps.spawn_allow)
    return (spawns and bool(caps.network.allow) and probe.achieved == "scoped"
            and not getattr(probe, "netns", True))


def process_shortfall(caps: Any, probe: ProbeLike) -> bool:
    """A Landlock host where a capsule's subprocesses would share mur's uid with nothing keeping them
    from other processes: not root (no session uid), no user namespace (no pid namespace) and
    Landlock below ABI 6 (no signal scoping). Probes that do not measure it count as able."""
    spawns = bool(caps.shell_allow or caps.spawn_allow)
    return (spawns and probe.achieved == "scoped" and not getattr(probe, "root", True)
            and not getattr(probe, "userns", True) and getattr(probe, "landlock_abi", 6) < 6)


def subprocess_shortfall(caps: Any, probe: ProbeLike) -> str | None:
    """Why this host cannot confine this capsule's subprocesses as `scoped` requires, or None."""
    if network_shortfall(caps, probe):
        return NETWORK_SHORTFALL
    return PROCESS_SHORTFALL if process_shortfall(caps, probe) else None


def achieved_class(probe: ProbeLike, workdir_exec: bool, network_short: bool | str | None = False,
                   view_short: str | None = None) -> str:
    """The host's class, capped at advisory when the capsule keeps its workdir executable or its
    subprocesses cannot be confined here (``network_short``: True, or subprocess_shortfall()'s reason),
    and at scoped when they cannot run in a composed root (``view_short``: view_shortfall()'s reason)."""
    achieved = probe.achieved if probe.achieved in CLASS_RANK else "advisory"
    if achieved == "sealed" and view_short:
        achieved = "scoped"
    return "advisory" if workdir_exec or network_short else achieved


def shortfall_reason(declared: str, achieved: str, workdir_exec: bool,
                     network_short: bool | str | None = False, sealed_blocker: str | None = None) -> str | None:
    """Why `achieved` falls short of `declared`, naming the missing mechanism; None when met."""
    if CLASS_RANK[achieved] >= CLASS_RANK[declared]:
        return None
    if workdir_exec:
        return WORKDIR_EXEC_SHORTFALL
    if isinstance(network_short, str):
        return network_short
    if network_short:
        return NETWORK_SHORTFALL
    if declared == "sealed":
        return sealed_shortfall(sealed_blocker)
    return SCOPED_SHORTFALL


def floor_error(declared: str, achieved: str, reason: str) -> MurError:
    """The E-CAP-003 refusal, worded as the spec shows it."""
    return MurError(
        "E-CAP-003",
        f"declared containment class '{declared}' is not achievable on this host (achieved: '{achieved}'): {reason}",
        f"lower the declared floor to '{achieved}' (capabilities.containment in murmur.yaml, containment in "
        f".murmur/config.yaml, or --containment), or run on a host that provides '{declared}'",
    )


def check_floor(floor: Floor, probe: ProbeLike, workdir_exec: bool, network_short: bool | str | None = False,
                view_short: str | None = None) -> str:
    """Raise E-CAP-003 when the floor is unmet; returns the achieved class."""
    achieved = achieved_class(probe, workdir_exec, network_short, view_short)
    reason = shortfall_reason(floor.declared, achieved, workdir_exec, network_short,
                              view_short or getattr(probe, "sealed_reason", None))
    if reason is not None:
        raise floor_error(floor.declared, achieved, reason)
    return achieved
