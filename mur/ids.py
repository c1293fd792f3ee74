"""Identifiers: 32 lowercase hex with upstream's prefixes (reference/upstream.md 3.1).

`ses_` sessions, `tsk_` tasks, `ctx_` contexts: UUIDv7 (RFC 9562: 48-bit Unix ms, version 7, variant
10; Python 3.11 has no uuid.uuid7), time-ordered as text.

`dep_` deployments keep that form but not that layout. People type deployment ids by prefix (`mur deploy
status 3f9a`), and UUIDv7's first 8 hex digits change only every 65 s, so deployments made together
(a fleet rolled in one command) shared 9 characters and every short prefix was ambiguous. A deployment
id is a UUIDv8 (RFC 9562's custom layout) whose first 32 bits are random and whose next 48 bits are the
Unix ms: any two differ within the first few characters, and `created_ms` still orders them by time
(`deployment_sort_key` sorts old UUIDv7 ids and new ones together).
"""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_seq = 0


def uuid7_hex() -> str:
    """A UUIDv7 as 32 hex chars; monotonic within a process (a counter fills rand_a within one ms)."""
    global _last_ms, _seq
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _seq = (_seq + 1) & 0xFFF
            if _seq == 0:
                ms += 1
        else:
            _seq = int.from_bytes(os.urandom(2), "big") & 0x7FF
        _last_ms = ms
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | _seq << 64 | 0b10 << 62 | rand_b
    return f"{value:032x}"


def session_id() -> str:
    return "ses_" + uuid7_hex()


def task_id() -> str:
    return "tsk_" + uuid7_hex()


def context_id() -> str:
    return "ctx_" + uuid7_hex()


def deployment_id() -> str:
    """`dep_` + a UUIDv8: 32 random bits, 48-bit Unix ms, version 8, 12-bit counter, variant 10, random."""
    v7 = int(uuid7_hex(), 16)  # its ms and per-process counter keep ids made in one ms apart and ordered
    ms, seq = v7 >> 80, (v7 >> 64) & 0xFFF
    head = int.from_bytes(os.urandom(4), "big")
    # hex digit 12 is the version and the top bits of digit 16 the variant, wherever the fields go
    value = (head << 96 | (ms >> 32) << 80 | 0x8 << 76 | seq << 64 | 0b10 << 62 | (ms & 0xFFFFFFFF) << 30
             | int.from_bytes(os.urandom(4), "big") >> 2)
    return f"dep_{value:032x}"


def created_ms(ident: str) -> int | None:
    """The Unix ms a `dep_`/`ses_`/`tsk_`/`ctx_` id was made at (UUIDv7 or mur's deployment UUIDv8)."""
    hexpart = ident.partition("_")[2] if "_" in ident else ident
    if len(hexpart) != 32:
        return None
    try:
        value = int(hexpart, 16)
    except ValueError:
        return None
    version = (value >> 76) & 0xF
    if version == 7:
        return value >> 80
    if version == 8:
        return ((value >> 80) & 0xFFFF) << 32 | (value >> 30) & 0xFFFFFFFF
    return None


def deployment_sort_key(ident: str) -> tuple[int, int, str]:
    """Orders ids by the time they were made, then by the per-process counter of that ms (ids mur did
    not make sort first, by text)."""
    ms = created_ms(ident)
    if ms is None:
        return (0, 0, ident)
    return (ms, (int(ident.partition("_")[2], 16) >> 64) & 0xFFF, ident)


# The uids (gid of the same number) mur leases to each session's shell tools when it runs as root
# (mur.sandbox.uids): 0x7A6D0000-0x7A6DFFFF, unused in systemd's map of uid ranges, else systemd's own
# DynamicUser range inside a user namespace that does not map the first. Whatever such a uid owns,
# a tool made.
SESSION_UID_RANGES = ((0x7A6D0000, 0x7A6DFFFF), (61184, 65519))
