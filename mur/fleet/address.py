"""Finding deployments by what people call them: a capsule or fleet name, `name@target`, an id prefix.

`mur send hello ...` asks every deployment of `hello` whether it answers (its agent card and token,
in parallel, a couple of seconds at most) and sends to one that does, chosen at random so senders
spread over the fleet; `--target web-1` names the one. Fleet-wide commands (`mur deploy stop hello`)
take every deployment the name covers.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable
from urllib.parse import urlsplit

from mur.deploy.state import Deployment, DeploymentStore, fleet_tag, named, resolve_id
from mur.errors import MurError

Check = Callable[[Deployment], bool]


def resolve_many(records: list[Deployment], ident: str, only: list[str] | None = None) -> list[Deployment]:
    """What a fleet-wide command acts on: every deployment of a name (narrowed by `only`: target
    names or groups), else the one deployment an id, prefix or `name@target` names."""
    hits = named(records, ident) if "@" not in ident and not ident.startswith("dep_") else []
    if not hits:
        hits = [resolve_id(records, ident)]
    wanted = {w.strip() for item in only or [] for w in item.split(",") if w.strip()}
    if wanted:
        hits = [r for r in hits if fleet_tag(r).get("target") in wanted or set(fleet_tag(r).get("groups") or ()) & wanted]
        if not hits:
            raise MurError("E-FLEET-002", f"--only {', '.join(sorted(wanted))}: no deployment of '{ident}' there",
                           "`mur deploy ls` shows the targets of each fleet")
    return hits


def answers(rec: Deployment, timeout: float = 2.0) -> bool:
    """The deployment's URL answers its agent card and accepts its token, from here. An SSH
    deployment on its host's loopback counts as answering: `mur send` reaches it through its own
    SSH forward (mur.remote.reach), and a dead one fails there with the reason."""
    from mur.deploy.health import check_once
    from mur.remote.reach import needs_forward

    if needs_forward(rec) and urlsplit(rec.url or "").hostname in ("127.0.0.1", "localhost", "::1"):
        return True
    parts = urlsplit(rec.url or "")
    if not parts.hostname or not parts.port:
        return False
    token = None
    if rec.token_file:
        try:
            with open(rec.token_file, encoding="utf-8") as fh:
                token = fh.read().strip() or None
        except OSError:
            return False
    return bool(check_once(parts.hostname, parts.port, token=token, pin=rec.tls_pin, timeout=timeout).get("ok"))


def pick(name: str, target: str | None = None, store: DeploymentStore | None = None,
         check: Check = answers) -> Deployment | None:
    """An answering deployment `name` covers (on `target` when given); None when `name` is no
    capsule or fleet name here (the caller tries it as a URL or an id)."""
    if "://" in name or "@" in name or ":" in name:
        return None
    records = (store or DeploymentStore()).load()
    hits = named(records, name)
    if not hits:
        if target:
            raise MurError("E-DEPLOY-008", f"no deployment named '{name}'", "list deployments with `mur deploy ls`")
        return None
    if target:
        hits = [r for r in hits if target in (fleet_tag(r).get("target"), r.target.host, r.target.label, r.deployment_id)]
        if not hits:
            raise MurError("E-DEPLOY-008", f"'{name}' has no deployment on target '{target}'",
                           "`mur deploy ls` shows the targets of each fleet")
    if len(hits) == 1:
        return hits[0]
    with ThreadPoolExecutor(max_workers=min(16, len(hits))) as pool:
        ok = [r for r, good in zip(hits, pool.map(check, hits)) if good]
    if not ok:
        where = ", ".join(_label(r) for r in hits)
        hint = f"`mur deploy status {name}` shows each one's state"
        if any(r.tunnel for r in hits):
            hint += "; a service bound to an SSH host's loopback answers here through its tunnel (the command " \
                    "`mur deploy status` shows), or publish it"
        raise MurError("E-FLEET-003", f"no deployment of '{name}' answers from here ({where})", hint)
    return random.choice(ok)


def _label(rec: Deployment) -> str:
    return f"{rec.name}@{fleet_tag(rec).get('target') or rec.target.host or rec.provider}"


def describe(rec: Deployment) -> dict[str, Any]:
    return {"deployment_id": rec.deployment_id, "address": _label(rec), "url": rec.url}
