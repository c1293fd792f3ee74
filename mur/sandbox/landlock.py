"""Landlock through raw syscalls 444-446 (create_ruleset, add_rule, restrict_self), ABI-aware up to 7.

Why raw ctypes and not PyPI ``landlock``: that package is filesystem-only (no ABI-4 TCP rules, no
ABI-6 scopes) and misreads a stale errno as failure (environment.md section 1a).

Two halves, both run by the session's spawner (zygote.py) once, in the tools' mount namespace (so
every path is the one the tools see, on the session disk or in their composed root):
  * ``build_ruleset``: every path is opened, checked and added; an error names the path;
  * ``restrict_self(fd)`` (two syscalls), last before seccomp.
The ruleset fd is O_CLOEXEC (the kernel sets it), so it never survives into the executed tool.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # same numbers on every arch
CREATE_RULESET_VERSION = 1 << 0
PR_SET_NO_NEW_PRIVS = 38
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2

# Filesystem access rights (include/uapi/linux/landlock.h).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

# Rights that make sense on a non-directory; the kernel answers EINVAL to dir-only bits on a file.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

_NAMES = {
    EXECUTE: "execute", WRITE_FILE: "write_file", READ_FILE: "read_file", READ_DIR: "read_dir",
    REMOVE_DIR: "remove_dir", REMOVE_FILE: "remove_file", MAKE_CHAR: "make_char", MAKE_DIR: "make_dir",
    MAKE_REG: "make_reg", MAKE_SOCK: "make_sock", MAKE_FIFO: "make_fifo", MAKE_BLOCK: "make_block",
    MAKE_SYM: "make_sym", REFER: "refer", TRUNCATE: "truncate", IOCTL_DEV: "ioctl_dev",
}


def fs_rights_for_abi(abi: int) -> int:
    """Every filesystem right the given ABI knows (declaring them all denies what no rule grants)."""
    if abi <= 0:
        return 0
    if abi == 1:
        return (1 << 13) - 1
    if abi == 2:
        return (1 << 14) - 1
    if abi in (3, 4):
        return (1 << 15) - 1
    return (1 << 16) - 1  # 5, 6, 7 (7 added audit-log flags, no new access right)


def rights_names(bits: int) -> list[str]:
    """Human-readable names of a rights mask (for docs, explain-scope and tests)."""
    return [name for bit, name in sorted(_NAMES.items()) if bits & bit]


_libc = ctypes.CDLL(None, use_errno=True)
# Looked up defensively: this module is imported (not used) on macOS, whose libc has no prctl.
_syscall = getattr(_libc, "syscall", None)
_prctl = getattr(_libc, "prctl", None)
if _syscall is not None:
    _syscall.restype = ctypes.c_long
if _prctl is not None:
    _prctl.restype = ctypes.c_int


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # packed in the kernel UAPI
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock {what}: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI (0 when the syscall is missing, disabled or filtered)."""
    if _syscall is None or _prctl is None:
        return 0
    ctypes.set_errno(0)
    result = _syscall(
        ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)
    )
    return 0 if result < 0 else int(result)


@dataclass(frozen=True)
class Ruleset:
    """An open ruleset fd built in the parent, plus the ABI it was built for."""

    fd: int
    abi: int

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def build_ruleset(
    abi: int,
    handled_fs: int,
    path_rules: list[tuple[str, int]],
    *,
    handled_net: int = 0,
    tcp_connect: tuple[int, ...] = (),
    tcp_bind: tuple[int, ...] = (),
    scoped: int = 0,
    missing_ok: bool = False,
) -> Ruleset:
    """Create a ruleset and add every rule; raises OSError naming the path or port that failed.

    ``abi`` selects the attribute size the kernel reads: 8 bytes (fs only) below 4, 16 with the
    network field (ABI 4-5), 24 with the scope field (ABI >= 6). ``missing_ok``: a path that does
    not exist (in the tools' view) is skipped: a rule on nothing grants nothing.
    """
    if abi < 1:
        raise OSError(95, "landlock is not available on this kernel")
    size = 8
    attr = _RulesetAttr(handled_fs, 0, 0)
    if abi >= 4:
        size = 16
        attr.handled_access_net = handled_net
    if abi >= 6:
        size = 24
        attr.scoped = scoped
    ctypes.set_errno(0)
    fd = _check(
        _syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "create_ruleset",
    )
    try:
        for path, access in path_rules:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                if missing_ok:
                    continue
                raise
            try:
                bits = access if os.path.isdir(path) else access & FILE_RIGHTS
                bits &= handled_fs
                if not bits:
                    continue
                _check(
                    _syscall(
                        ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(fd), ctypes.c_int(RULE_PATH_BENEATH),
                        ctypes.byref(_PathBeneathAttr(bits, pfd)), ctypes.c_uint32(0),
                    ),
                    f"add_rule({path})",
                )
            finally:
                os.close(pfd)
        if abi >= 4:
            for ports, bit in ((tcp_connect, NET_CONNECT_TCP), (tcp_bind, NET_BIND_TCP)):
                if not handled_net & bit:
                    continue
                for port in ports:
                    _check(
                        _syscall(
                            ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(fd), ctypes.c_int(RULE_NET_PORT),
                            ctypes.byref(_NetPortAttr(bit, port)), ctypes.c_uint32(0),
                        ),
                        f"add_rule(tcp port {port})",
                    )
    except BaseException:
        os.close(fd)
        raise
    return Ruleset(fd, abi)


def restrict_self(ruleset_fd: int) -> None:
    """Child side: no_new_privs, then enforce the ruleset on the calling (single) thread."""
    ctypes.set_errno(0)
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(
        _syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
        "restrict_self",
    )
