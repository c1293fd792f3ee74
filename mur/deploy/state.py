"""`~/.murmur/deployments.json`: the local record of every deployment, written atomically.

The file is a JSON array (upstream's shape, so `mur deploy ls` reads old files) of objects that
carry upstream's fields (deployment_id, provider, ip, url, manifest_path, started_at, status) plus
what rollback and the lifecycle commands need (target coordinates, release history, tunnel
command). Several mur processes may deploy at once, so every read-modify-write holds an exclusive
``flock`` on a sibling lock file; writes go to a temp file that is fsynced and renamed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from mur.errors import MurError
from mur.fsutil import atomic_write_bytes, locked
from mur.paths import deployments_path

STATE_FILENAME = "deployments.json"


def state_path() -> Path:
    return deployments_path()


def new_deployment_id() -> str:
    """`dep_` + a UUIDv7 in simple form (32 lowercase hex): time-ordered, like upstream's ids."""
    ms = int(time.time() * 1000) & ((1 << 48) - 1)
    rand_a = secrets.randbits(12)
    rand_b = secrets.randbits(62)
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return "dep_" + f"{value:032x}"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


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
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise MurError("E-IO-003", "deployments.json is malformed: expected a JSON array of objects", f"fix or move {path}")
    return data


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """mur.fsutil.atomic_write_bytes (private until renamed), its OSError as E-IO-003."""
    try:
        atomic_write_bytes(path, data, mode)
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot write {path}: {exc.strerror or exc}") from exc


class DeploymentStore:
    """The deployments file plus its lock; every mutation is one locked read-modify-write."""

    def __init__(self, path: Path | None = None):
        self.path = path or state_path()

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.path.with_name(self.path.name + ".lock"))

    def load(self) -> list[dict[str, Any]]:
        """All records (an empty list when the file does not exist)."""
        with self._locked():
            return _read(self.path)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[list[dict[str, Any]]]:
        """Yield the record list under the lock; it is written back if the block succeeds."""
        with self._locked():
            records = _read(self.path)
            yield records
            body = json.dumps(records, indent=2, sort_keys=False) + "\n"
            atomic_write(self.path, body.encode("utf-8"), 0o600)

    def find(self, ident: str) -> dict[str, Any]:
        """The record whose id is `ident`, else the one it uniquely prefixes (E-DEPLOY-008)."""
        return resolve_id(self.load(), ident)

    def upsert(self, record: dict[str, Any]) -> None:
        with self.transaction() as records:
            for i, existing in enumerate(records):
                if existing.get("deployment_id") == record["deployment_id"]:
                    records[i] = record
                    break
            else:
                records.append(record)

    def update(self, dep_id: str, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into one record and return it."""
        with self.transaction() as records:
            for rec in records:
                if rec.get("deployment_id") == dep_id:
                    rec.update(fields)
                    return dict(rec)
        raise _unknown(dep_id)

    def remove(self, dep_id: str) -> None:
        with self.transaction() as records:
            records[:] = [r for r in records if r.get("deployment_id") != dep_id]


def _unknown(ident: str) -> MurError:
    return MurError("E-DEPLOY-008", f"no deployment found with id '{ident}'", "list deployments with `mur deploy ls`")


def resolve_id(records: list[dict[str, Any]], ident: str) -> dict[str, Any]:
    """Exact id first, then a unique prefix (with or without `dep_`); E-DEPLOY-008 otherwise."""
    ident = ident.strip()
    if not ident:
        raise _unknown(ident)
    for rec in records:
        if rec.get("deployment_id") == ident:
            return rec
    wanted = ident if ident.startswith("dep_") else "dep_" + ident
    hits = [r for r in records if str(r.get("deployment_id", "")).startswith(wanted)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        names = ", ".join(str(r["deployment_id"]) for r in hits)
        raise MurError("E-DEPLOY-008", f"ambiguous prefix '{ident}' matches multiple deployments: {names}",
                       "give more characters of the id")
    raise _unknown(ident)
