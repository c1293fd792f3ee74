"""One view of every deployment: grouped by capsule, then fleet (which version where, how it is, when
it was last deployed), and whether a fleet's targets agree on what they serve."""

from __future__ import annotations

from typing import Any

from mur.ids import deployment_sort_key


def _tag(rec: dict[str, Any]) -> dict[str, Any]:
    tag = rec.get("fleet")
    return tag if isinstance(tag, dict) else {}


def fleet_of(rec: dict[str, Any]) -> str | None:
    tag = _tag(rec)
    if not tag.get("name"):
        return None
    return f"{tag['name']}.{tag['destination']}" if tag.get("destination") else str(tag["name"])


def where(rec: dict[str, Any]) -> str:
    t = rec.get("target") or {}
    if rec.get("provider") == "ssh":
        return f"{t.get('user') or 'root'}@{t.get('host')}:{t.get('port') or 22}"
    return str(rec.get("container") or rec.get("provider") or "")


def release_of(rec: dict[str, Any]) -> Any:
    rel = rec.get("release")
    if isinstance(rel, dict):
        return rel.get("n") if rel.get("n") is not None else rel.get("image")
    return rel


def ordered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Capsule, then fleet (plain deployments first), then target name, then age."""
    return sorted(records, key=lambda r: (str(r.get("name") or ""), fleet_of(r) or "", str(_tag(r).get("target") or ""),
                                          deployment_sort_key(str(r.get("deployment_id") or ""))))


def fleets(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per fleet: its targets, what each serves, and whether they all serve the same capsule. The same
    is the same capsule content (the release's capsule digest, what host releases and images both
    record), not the same release number: a Docker target's release is an image, and a host that
    once failed a deploy counts its releases one ahead of the others; neither differs in what it serves."""
    out: dict[str, dict[str, Any]] = {}
    served: dict[str, dict[Any, list[dict[str, Any]]]] = {}  # fleet -> what it serves -> its records
    for rec in ordered(records):
        key = fleet_of(rec)
        if key is None:
            continue
        group = out.setdefault(key, {"fleet": key, "capsule": rec.get("name"), "targets": [], "serving": {}})
        group["targets"].append(_target(rec))
        served.setdefault(key, {}).setdefault(_content(rec), []).append(rec)
        group["last_deploy"] = max(group.get("last_deploy") or "", rec.get("updated_at") or "")
    for key, group in out.items():
        held = served[key]
        names = {what: _named(what, recs) for what, recs in held.items()}
        if len(set(names.values())) < len(names):  # same version and release number, other content
            names = {what: _named(what, recs, by_digest=True) for what, recs in held.items()}
        group["serving"] = {names[what]: [_target(r) for r in recs] for what, recs in held.items()}
        group["consistent"] = len(held) == 1
    return list(out.values())


def _target(rec: dict[str, Any]) -> str:
    return _tag(rec).get("target") or where(rec)


def _content(rec: dict[str, Any]) -> str | tuple[Any, Any]:
    """What a deployment serves: its release's capsule digest, else (version, release) for a record
    that has none (an older mur's)."""
    rel = rec.get("release") if isinstance(rec.get("release"), dict) else {}
    return rel.get("capsule_digest") or (rec.get("version"), release_of(rec))


def _named(what: str | tuple[Any, Any], recs: list[dict[str, Any]], by_digest: bool = False) -> str:
    """How a summary names what some targets serve: the version and the release they share, else
    (or `by_digest`) the version and the capsule digest's first 12 hex digits."""
    version = "/".join(sorted({str(r.get("version")) for r in recs}))
    releases = {str(release_of(r)) for r in recs}
    if isinstance(what, str) and (by_digest or len(releases) > 1):
        return f"{version} (capsule {what[:12]})"
    return f"{version} (release {releases.pop()})"


def summary_line(group: dict[str, Any]) -> str:
    serving = group["serving"]
    if group["consistent"]:
        (what, targets), = serving.items()
        return f"fleet {group['fleet']}: {what} on all {len(targets)} target(s) · last deploy {group.get('last_deploy') or '-'}"
    parts = "; ".join(f"{what} on {', '.join(targets)}" for what, targets in serving.items())
    return f"fleet {group['fleet']}: targets differ: {parts}"
