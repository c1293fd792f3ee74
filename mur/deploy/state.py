"""`~/.murmur/deployments.json`: the local record of every deployment, typed, written atomically.

The file is a JSON array (upstream's shape, so `mur deploy ls` reads old files) of objects that
carry upstream's fields (deployment_id, provider, ip, url, manifest_path, started_at, status) plus
what the lifecycle commands need (target coordinates, release history, tunnel, token file, pin).
`Deployment` is the typed view; keys it does not know are kept as they were. Several mur processes
may deploy at once, so every read-modify-write holds an exclusive ``flock`` on a sibling lock
file; writes go to a temp file that is fsynced and renamed.

Status: the state `mur deploy status` last derived from the target (mur.deploy.observe): running |
starting | crash-looping | stopped | diverged | incomplete. Every command that changes a target
first marks its record `incomplete` with `pending` (the command, what it is doing, and, when it
could not undo everything, what is left); only a finished command clears it. So a record that
says anything but `incomplete` was written after the command ended, and one that says
`incomplete` tells what to repair (the next deploy does; `destroy` removes everything).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from mur import ids
from mur.deploy.targets import TargetSpec
from mur.errors import MurError
from mur.fsutil import atomic_write_bytes, locked
from mur.paths import deployments_path

STATUSES = ("running", "starting", "crash-looping", "stopped", "diverged", "incomplete")


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold off SIGINT while a record is written: a Ctrl-C lands right after it, never inside."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def new_deployment_id() -> str:
    """`dep_` + 32 lowercase hex, random first, time after (mur.ids.deployment_id says why)."""
    return ids.deployment_id()


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class Release:
    """One release as it was deployed (release.json on a host; the image for Docker)."""

    n: int | None = None
    digest: str = ""
    bundle: str = ""
    bundle_version: str = ""
    port: int | None = None
    image: str | None = None
    precompiled: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> "Release | None":
        if not isinstance(d, dict):
            return None
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: d[k] for k in known if k in d}, extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out = {**self.extra, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}}
        return {k: v for k, v in out.items() if v is not None}

    @property
    def ident(self) -> int | str | None:
        """The release number on a host, the image on Docker."""
        return self.n if self.n is not None else self.image


@dataclass
class Deployment:
    deployment_id: str
    provider: str  # local | ssh | docker
    target: TargetSpec
    manifest_path: str = ""
    name: str = ""
    version: str = ""
    status: str = "incomplete"
    url: str = ""
    ip: str = "127.0.0.1"
    started_at: str = ""
    updated_at: str = ""
    home: str = ""
    init: str = "supervisor"
    sudo: bool = False
    helper: bool = False  # privileged steps go through the prepared host's root helper (not sudo sh -c)
    service_port: int | None = None
    bind: str = "127.0.0.1"
    tunnel: str | None = None
    tunnel_port: int | None = None
    boot: str = "none"
    keep_sessions: int = 5
    release: Release | None = None
    previous: Release | None = None
    bundles: list[str] = field(default_factory=list)
    artifacts: list[list[str]] = field(default_factory=list)
    precompiled: list[str] = field(default_factory=list)
    mur_version: str = ""
    container: str | None = None
    image: str | None = None
    token_file: str | None = None  # the local copy of the A2A token (0600); the record never holds the token
    tls_pin: str | None = None  # SHA-256 of the service certificate (DER) when it speaks HTTPS
    # an unfinished command: {"command", "phase", "at", "left": [...], "repair"} (None when none is)
    pending: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _RELEASES = ("release", "previous")

    @property
    def front(self) -> dict[str, Any] | None:
        """The front this deployment records ({"port": P, "bind": ...}; mur.deploy.fronted), or None."""
        front = self.extra.get("front")
        return front if isinstance(front, dict) and front.get("port") else None

    @property
    def client_port(self) -> int | None:
        """The port clients are served on, on the target: the front's when the deployment has one
        (the service's own port is private and restarts at every release), else the service's."""
        return int(self.front["port"]) if self.front else self.service_port

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Deployment":
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kw: dict[str, Any] = {k: d[k] for k in known if k in d}
        kw["target"] = TargetSpec.from_record(d.get("target"), str(d.get("provider") or "ssh"), str(d.get("ip") or ""))
        kw["provider"] = str(d.get("provider") or kw["target"].provider)
        for k in cls._RELEASES:
            kw[k] = Release.from_dict(d.get(k))
        return cls(**kw, extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "deployment_id": self.deployment_id, "provider": self.provider, "provider_vm_id": self.container or "",
            "region": "", **self.extra}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name == "target":
                value = value.to_record()
            elif f.name in self._RELEASES:
                value = value.to_dict() if value is not None else None
            out[f.name] = value
        return out

    def uses(self, bundle: str, artifacts: list[tuple[str, str]], precompiled: list[str]) -> None:
        """Add shared files this deployment references (destroy drops exactly these references)."""
        self.bundles = sorted(set(self.bundles) | {bundle})
        self.artifacts = [list(a) for a in sorted({tuple(a) for a in self.artifacts} | set(artifacts))]
        self.precompiled = sorted(set(self.precompiled) | set(precompiled))


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot read {path}: {exc.strerror or exc}") from exc
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MurError("E-IO-003", f"deployments.json is malformed: {exc}", f"fix or move {path}") from exc
    if not isinstance(data, list) or not all(isinstance(d, dict) and d.get("deployment_id") for d in data):
        raise MurError("E-IO-003", "deployments.json is malformed: expected a JSON array of deployment objects",
                       f"fix or move {path}")
    return data


class DeploymentStore:
    """The deployments file plus its lock; every mutation is one locked read-modify-write."""

    def __init__(self, path: Path | None = None):
        self.path = path or deployments_path()

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.path.with_name(self.path.name + ".lock"))

    def load(self) -> list[Deployment]:
        """All records (an empty list when the file does not exist)."""
        with self._locked():
            return [Deployment.from_dict(d) for d in _read(self.path)]

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[list[dict[str, Any]]]:
        with self._locked():
            records = _read(self.path)
            yield records
            body = (json.dumps(records, indent=2) + "\n").encode("utf-8")
            try:
                atomic_write_bytes(self.path, body, 0o600)
            except OSError as exc:
                raise MurError("E-IO-003", f"cannot write {self.path}: {exc.strerror or exc}") from exc

    def find(self, ident: str) -> Deployment:
        """The record whose id is `ident`, else the one it uniquely prefixes (E-DEPLOY-008)."""
        return resolve_id(self.load(), ident)

    def get(self, dep_id: str) -> Deployment | None:
        return next((d for d in self.load() if d.deployment_id == dep_id), None)

    def save(self, dep: Deployment) -> Deployment:
        """Insert or replace one record (updated_at set now)."""
        dep.updated_at = now_rfc3339()
        dep.started_at = dep.started_at or dep.updated_at
        body = dep.to_dict()
        with self._transaction() as records:
            for i, existing in enumerate(records):
                if existing.get("deployment_id") == dep.deployment_id:
                    records[i] = body
                    break
            else:
                records.append(body)
        return dep

    def remove(self, dep_id: str, only_if: Callable[[Deployment], bool] | None = None) -> bool:
        """Forget a record (`only_if`: only when it still satisfies this); whether it was removed."""
        with self._transaction() as records:
            keep = [r for r in records if r.get("deployment_id") != dep_id
                    or (only_if is not None and not only_if(Deployment.from_dict(r)))]
            gone = len(keep) != len(records)
            records[:] = keep
        return gone

    def update(self, dep_id: str, change: Callable[[Deployment], None]) -> Deployment | None:
        """Change one record in place, read and written under the lock (a status that runs while a
        deploy saves never writes back a stale copy of the whole record)."""
        with self._transaction() as records:
            for i, existing in enumerate(records):
                if existing.get("deployment_id") == dep_id:
                    dep = Deployment.from_dict(existing)
                    change(dep)
                    dep.updated_at = now_rfc3339()
                    records[i] = dep.to_dict()
                    return dep
        return None

    def reserve(self, make: Callable[[], Deployment], find: Callable[[list[Deployment]], Deployment | None]
                ) -> tuple[Deployment, bool]:
        """The record `find` picks, or a new one from `make` inserted now (under one lock, so two
        deploys of the same capsule from this HOME agree on one deployment); (record, created)."""
        with self._transaction() as records:
            found = find([Deployment.from_dict(r) for r in records])
            if found is not None:
                return found, False
            dep = make()
            dep.updated_at = now_rfc3339()
            dep.started_at = dep.started_at or dep.updated_at
            records.append(dep.to_dict())
            return dep, True


class UnknownDeployment(MurError):
    """No deployment has this id or id prefix (E-DEPLOY-008): a caller may read the word otherwise."""


def _unknown(ident: str) -> MurError:
    return UnknownDeployment("E-DEPLOY-008", f"no deployment found with id '{ident}'",
                             "list deployments with `mur deploy ls`")


def fleet_tag(rec: Deployment) -> dict[str, Any]:
    """Where a fleet deploy put this deployment: {name, destination, target, groups} (mur.fleet), or {}."""
    tag = rec.extra.get("fleet")
    return tag if isinstance(tag, dict) else {}


def _by_place(records: list[Deployment], ident: str) -> Deployment:
    """`capsule@target`: the capsule's deployment on a fleet target (by its name in the fleet file, or
    the host); the part before `@` may be the fleet's `name.destination` to tell destinations apart."""
    who, _, where = ident.partition("@")
    hits = []
    for rec in records:
        tag = fleet_tag(rec)
        fleet = f"{tag.get('name')}.{tag['destination']}" if tag.get("destination") else tag.get("name")
        if who in (rec.name, fleet) and where in (tag.get("target"), rec.target.host, rec.target.label):
            hits.append(rec)
    if len(hits) == 1:
        return hits[0]
    if hits:
        names = ", ".join(f"{r.deployment_id} ({fleet_tag(r).get('destination') or 'no destination'})" for r in hits)
        raise MurError("E-DEPLOY-008", f"'{ident}' matches several deployments: {names}",
                       "name the destination too, as NAME.DESTINATION@TARGET, or give the id")
    raise MurError("E-DEPLOY-008", f"no deployment of '{who}' on '{where}'", "list deployments with `mur deploy ls`")


def fleet_key(rec: Deployment) -> str | None:
    """The fleet a deployment belongs to as people name it: `name`, or `name.destination`."""
    tag = fleet_tag(rec)
    if not tag.get("name"):
        return None
    return f"{tag['name']}.{tag['destination']}" if tag.get("destination") else str(tag["name"])


def named(records: list[Deployment], name: str) -> list[Deployment]:
    """Every deployment whose capsule name or fleet (`name` or `name.destination`) is `name`."""
    name = name.strip()
    return [r for r in records if name and (r.name == name or fleet_key(r) == name or fleet_tag(r).get("name") == name)]


def resolve_id(records: list[Deployment], ident: str) -> Deployment:
    """Exact id first, then `capsule@target`, then a capsule or fleet name that covers exactly one
    deployment, then a unique prefix (with or without `dep_`); E-DEPLOY-008 otherwise."""
    ident = ident.strip()
    if not ident:
        raise _unknown(ident)
    if "@" in ident and not ident.startswith("dep_"):
        return _by_place(records, ident)
    for rec in records:
        if rec.deployment_id == ident:
            return rec
    covered = named(records, ident) if not ident.startswith("dep_") else []
    if len(covered) == 1:
        return covered[0]
    if covered:
        names = ", ".join(f"{r.deployment_id} ({fleet_tag(r).get('target') or r.target.label})" for r in covered)
        raise MurError("E-DEPLOY-008", f"'{ident}' names {len(covered)} deployments: {names}",
                       f"name one as {ident}@TARGET, or give its id")
    wanted = ident if ident.startswith("dep_") else "dep_" + ident
    hits = [r for r in records if r.deployment_id.startswith(wanted)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        names = ", ".join(r.deployment_id for r in hits)
        raise MurError("E-DEPLOY-008", f"ambiguous prefix '{ident}' matches multiple deployments: {names}",
                       "give more characters of the id")
    raise _unknown(ident)
