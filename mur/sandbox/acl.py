"""POSIX ACL xattr values (``system.posix_acl_access`` / ``_default``): decode, encode, edit.

The codec both the workdir grants (mur.sandbox.access) and the ancestors' shared search entries
(mur.sandbox.ancestors) use; plain data, no file walking.
"""

from __future__ import annotations

import errno
import os
import struct

ACCESS, DEFAULT = "system.posix_acl_access", "system.posix_acl_default"
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF
VERSION = 2


def decode(blob: bytes) -> list[tuple[int, int, int]]:
    """(tag, perm, id) entries of an ACL xattr value."""
    if len(blob) < 4 or struct.unpack_from("<I", blob)[0] != VERSION:
        raise ValueError("not a v2 POSIX ACL")
    return [struct.unpack_from("<HHI", blob, off) for off in range(4, len(blob) - 7, 8)]


def encode(entries: list[tuple[int, int, int]]) -> bytes:
    """The xattr value for these entries (sorted by tag, then id, as the kernel requires)."""
    return struct.pack("<I", VERSION) + b"".join(struct.pack("<HHI", *e) for e in sorted(entries, key=lambda e: (e[0], e[2])))


def from_mode(mode: int) -> list[tuple[int, int, int]]:
    return [(USER_OBJ, (mode >> 6) & 7, UNDEFINED_ID), (GROUP_OBJ, (mode >> 3) & 7, UNDEFINED_ID),
            (OTHER, mode & 7, UNDEFINED_ID)]


def with_user(entries: list[tuple[int, int, int]], uid: int, perm: int) -> list[tuple[int, int, int]]:
    """Add (or replace) user:uid:perm and recompute the mask as setfacl does."""
    out = [e for e in entries if not (e[0] == USER and e[2] == uid)]
    return _masked([*out, (USER, perm, uid)])


def without_user(entries: list[tuple[int, int, int]], uid: int) -> list[tuple[int, int, int]] | None:
    """Drop user:uid; None when only the base entries would remain (the xattr can go)."""
    out = [e for e in entries if not (e[0] == USER and e[2] == uid)]
    if not any(e[0] in (USER, GROUP) for e in out):
        return None
    return _masked(out)


def _masked(entries: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The entries with their mask recomputed as setfacl does: the union of the named and group entries."""
    rest = [e for e in entries if e[0] != MASK]
    mask = 0
    for tag, perm_bits, _ in rest:
        if tag in (USER, GROUP, GROUP_OBJ):
            mask |= perm_bits
    return rest + [(MASK, mask, UNDEFINED_ID)]


def get_acl(target: str | int, name: str) -> bytes | None:
    try:
        return os.getxattr(target, name)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, getattr(errno, "ENOATTR", errno.ENODATA)):
            return None
        raise
