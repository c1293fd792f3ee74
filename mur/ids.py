"""Identifiers: UUIDv7 (time-ordered) rendered as 32 lowercase hex, with upstream's prefixes.

`ses_` sessions, `tsk_` tasks, `ctx_` contexts, `dep_` deployments (reference/upstream.md 3.1).
Python 3.11 has no uuid.uuid7, so this builds one per RFC 9562: 48-bit Unix ms, version 7, variant 10.
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
    return "dep_" + uuid7_hex()


# The uids (gid of the same number) mur leases to each session's shell tools when it runs as root
# (mur.sandbox.uids): 0x7A6D0000-0x7A6DFFFF, unused in systemd's map of uid ranges, else systemd's own
# DynamicUser range inside a user namespace that does not map the first. Whatever such a uid owns,
# a tool made.
SESSION_UID_RANGES = ((0x7A6D0000, 0x7A6DFFFF), (61184, 65519))
