"""seccomp: compile the policy's syscall table with libseccomp, install the BPF in the child.

libseccomp (through ``pyseccomp``, or Debian's ``python3-seccomp`` whose module is ``seccomp`` and
has the same API) does the hard part: per-arch syscall numbers, the arch check (a foreign-arch
syscall, e.g. i386 ``int 0x80``, hits the default BADARCH action = kill) and argument comparisons.

It runs in the parent, once per session: ``compile_filter`` exports the two finished BPF programs
(the allowlist with its default errno, then the argument refinements; see ``SeccompTable``). The
forked child then needs two ``prctl(PR_SET_SECCOMP)`` calls and nothing else -- no allocation, no
library state, which matters because ``preexec_fn`` runs between fork and exec. When both
programs answer, the kernel keeps the stricter action, and of two errnos the later program's.
"""

from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mur.sandbox.policy import SeccompTable

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def load_module() -> Any | None:
    """The libseccomp binding: ``pyseccomp``, else Debian's ``seccomp``; None when neither loads."""
    for name in ("pyseccomp", "seccomp"):
        try:
            module = __import__(name)
        except (ImportError, OSError, AttributeError):
            # pyseccomp raises at import when libseccomp.so itself is missing.
            continue
        if hasattr(module, "SyscallFilter"):
            return module
    return None


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


@dataclass
class Program:
    """Compiled BPF programs (the allowlist, then its argument refinements), held in ctypes memory
    the child passes straight to the kernel; installed in that order."""

    bpf: list[bytes]
    _held: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        for blob in self.bpf:
            count = len(blob) // ctypes.sizeof(_SockFilter)
            buffer = (_SockFilter * count).from_buffer_copy(blob)
            self._held.append((buffer, _SockFprog(count, ctypes.cast(buffer, ctypes.POINTER(_SockFilter)))))

    @property
    def instructions(self) -> list[int]:
        return [len(blob) // ctypes.sizeof(_SockFilter) for blob in self.bpf]


_libc = ctypes.CDLL(None, use_errno=True)
_prctl = getattr(_libc, "prctl", None)  # absent on macOS, where nothing here is ever called
if _prctl is not None:
    _prctl.restype = ctypes.c_int


def _syscall_exists(module: Any, name: str) -> bool:
    try:
        return module.resolve_syscall(module.Arch.NATIVE, name) >= 0
    except Exception:  # unknown to this libseccomp version / arch
        return False


def _arg(sc: Any, index: int, op: str, value: int, mask: int) -> Any:
    if op == "masked_eq":
        return sc.Arg(index, sc.MASKED_EQ, mask, value)
    return sc.Arg(index, {"eq": sc.EQ, "ne": sc.NE, "gt": sc.GT}[op], value)


def _export(flt: Any) -> bytes:
    read_fd, write_fd = os.pipe()
    try:
        with os.fdopen(write_fd, "wb", closefd=True) as sink:
            flt.export_bpf(sink)
        chunks = []
        while True:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
    return b"".join(chunks)


def _allowlist(sc: Any, table: "SeccompTable") -> Any:
    flt = sc.SyscallFilter(sc.ERRNO(table.default_errno))
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)  # i386 int 0x80, x32: never a way around the table
    try:
        flt.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree: ~9 comparisons per syscall, not ~300
    except OSError:
        pass  # libseccomp < 2.5: a linear program, same decisions
    for name in table.allow:
        if _syscall_exists(sc, name):
            flt.add_rule(sc.ALLOW, name)
    for name, index, value in table.allow_if:
        if _syscall_exists(sc, name):
            flt.add_rule(sc.ALLOW, name, sc.Arg(index, sc.EQ, value))
    for name, err in table.refuse:
        # libseccomp refuses a rule that repeats the default action (EACCES): clone3's ENOSYS is it
        if err != table.default_errno and _syscall_exists(sc, name):
            flt.add_rule(sc.ERRNO(err), name)
    return flt


def _refinements(sc: Any, table: "SeccompTable") -> Any:
    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    for rule in table.rules:
        if _syscall_exists(sc, rule.syscall):
            flt.add_rule(sc.ERRNO(rule.errno), rule.syscall, *(_arg(sc, *c) for c in rule.conditions))
    return flt


def compile_filter(table: "SeccompTable", module: Any | None = None) -> Program:
    """Build both filters for ``table`` with libseccomp and export them as BPF (raises OSError)."""
    sc = module or load_module()
    if sc is None:
        raise OSError(errno.ENOSYS, "libseccomp is not available (install libseccomp2 and pyseccomp)")
    return Program([_export(_allowlist(sc, table)), _export(_refinements(sc, table))])


def install(program: Program) -> None:
    """Child side: no_new_privs (required for an unprivileged filter), then load each program."""
    ctypes.set_errno(0)
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp prctl(NO_NEW_PRIVS): {os.strerror(err)}")
    for _buffer, fprog in program._held:
        if _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp prctl(SET_SECCOMP): {os.strerror(err)}")
