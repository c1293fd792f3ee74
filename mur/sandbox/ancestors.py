"""Search (``--x``) grants on a workdir's ancestors, shared by concurrent sessions.

A session uid must traverse the workdir's ancestors for absolute paths into the workdir to work
(``HOME=<workdir>/.capsule-home``), so an ancestor it cannot search gets ``user:<uid>:--x`` in its
ACL (``access.WorkdirAccess``). Concurrent sessions under a common ancestor (``/root/project``
holding several ``--workdir`` trees) each add their own entry, so that ACL is shared state:

* every change is a read-modify-write under one host-wide lock (``/run/mur/ancestors/.lock``);
* the first session to touch an ancestor records what it was (its ACL xattr, or none, and its
  mode) in ``/run/mur/ancestors/<hash>.json``, with the uids holding an entry: a reference count;
* a session's end removes only its own entry; the last one restores the ancestor exactly;
* an entry whose session died without closing (its uid lease is no longer held: kill -9) is pruned
  by the next session that touches the ancestor.

Only root grants ACLs (mur's session uids exist only then), so the state directory is root's own.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import stat
from typing import Callable, Iterable

from mur.fsutil import atomic_write_bytes, lock_held, locked
from mur.sandbox import acl

STATE_DIR = "/run/mur/ancestors"


def lease_held(uid: int, lease_dir: str = "/run/mur/uids") -> bool:
    """Is ``uid`` leased by a live session (someone holds the flock on its lease file)?"""
    return lock_held(os.path.join(lease_dir, str(uid)))


def _locked(state_dir: str):
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    return locked(os.path.join(state_dir, ".lock"))


def _record_path(state_dir: str, path: str) -> str:
    return os.path.join(state_dir, hashlib.sha256(path.encode()).hexdigest()[:32] + ".json")


def _load(state_dir: str, path: str) -> dict | None:
    try:
        with open(_record_path(state_dir, path)) as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("path") == path else None


class Ancestors:
    """The search grants of one session uid (``acl`` is mur.sandbox.access: decode/encode/...)."""

    def __init__(self, uid: int, *, state_dir: str = STATE_DIR, alive: Callable[[int], bool] = lease_held):
        self.uid = uid
        self.state_dir = state_dir
        self.alive = alive
        self.paths: list[str] = []  # where this session holds an entry

    def grant(self, candidates: Iterable[str], notes: list[str]) -> None:
        """Add ``user:<uid>:--x`` on each of ``candidates`` the uid cannot search yet."""
        with _locked(self.state_dir):
            for path in candidates:
                try:
                    st = os.stat(path)
                    if st.st_mode & 0o001 or st.st_uid == self.uid:
                        continue
                    current = acl.get_acl(path, acl.ACCESS)
                    entries = acl.decode(current) if current else acl.from_mode(st.st_mode)
                    known = _load(self.state_dir, path)
                    own = next((p for t, p, i in entries if t == acl.USER and i == self.uid), 0)
                    mask = next((p for t, p, _i in entries if t == acl.MASK), 1)
                    if own & mask & 1 and (known is None or self.uid not in known["uids"]):
                        continue  # searchable through an entry that is not a session's (an admin's)
                    record = known or {"path": path, "mode": stat.S_IMODE(st.st_mode), "uids": [],
                                       "acl": base64.b64encode(current).decode() if current is not None else None}
                    entries = self._pruned(acl, record, entries)
                    entries = [e for e in entries if not (e[0] == acl.USER and e[2] == self.uid)]
                    entries.append((acl.USER, 1, self.uid))
                    os.setxattr(path, acl.ACCESS, acl.encode(_with_mask_bit(acl, entries)))
                    record["uids"] = sorted(set(record["uids"]) | {self.uid})
                    atomic_write_bytes(_record_path(self.state_dir, path), json.dumps(record).encode(), 0o600)
                    self.paths.append(path)
                except OSError as exc:
                    notes.append(f"{path} is not searchable by uid {self.uid} ({exc.strerror}): "
                                 "absolute paths into the workdir will fail; relative paths work")

    def revoke(self) -> None:
        """Remove this uid's entries; the last session on an ancestor restores it exactly (idempotent)."""
        if not self.paths:
            return
        with _locked(self.state_dir):
            for path in reversed(self.paths):
                record = _load(self.state_dir, path)
                if record is None:
                    continue
                record["uids"] = [u for u in record["uids"] if u != self.uid]
                try:
                    current = acl.get_acl(path, acl.ACCESS)
                    entries = [e for e in (acl.decode(current) if current else [])
                               if not (e[0] == acl.USER and e[2] == self.uid)]
                    entries = self._pruned(acl, record, entries)
                    if record["uids"]:
                        os.setxattr(path, acl.ACCESS, acl.encode(entries))
                        atomic_write_bytes(_record_path(self.state_dir, path), json.dumps(record).encode(), 0o600)
                        continue
                    _restore(acl, path, record)
                except OSError:
                    pass
                with contextlib.suppress(OSError):
                    os.unlink(_record_path(self.state_dir, path))
        self.paths.clear()

    def _pruned(self, acl, record: dict, entries: list) -> list:
        """Drop the entries (and references) of sessions that died without revoking theirs."""
        dead = {u for u in record["uids"] if u != self.uid and not self.alive(u)}
        record["uids"] = [u for u in record["uids"] if u not in dead]
        return [e for e in entries if not (e[0] == acl.USER and e[2] in dead)]


def _with_mask_bit(acl, entries: list) -> list:
    """The entries with a mask that lets search (x) through: the old mask plus x (a fresh ACL's mask
    is the group bits plus x), never a recomputed union that would widen other named entries."""
    mask = next((p for t, p, _i in entries if t == acl.MASK), None)
    if mask is None:
        mask = next((p for t, p, _i in entries if t == acl.GROUP_OBJ), 0)
    return [e for e in entries if e[0] != acl.MASK] + [(acl.MASK, mask | 1, acl.UNDEFINED_ID)]


def _restore(acl, path: str, record: dict) -> None:
    """Put the ancestor back exactly as the first session found it."""
    if record.get("acl") is not None:
        os.setxattr(path, acl.ACCESS, base64.b64decode(record["acl"]))
        return
    with contextlib.suppress(OSError):
        os.removexattr(path, acl.ACCESS)
    os.chmod(path, int(record["mode"]))
