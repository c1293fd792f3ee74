"""seccomp: compile the policy's syscall table with libseccomp, install the BPF in the child.

libseccomp (through ``pyseccomp``, or Debian's ``python3-seccomp`` whose module is ``seccomp`` and
has the same API) does the hard part: per-arch syscall numbers, the arch check (a foreign-arch
syscall, e.g. i386 ``int 0x80``, hits the default BADARCH action = kill) and argument comparisons.

It runs in the parent, once per session: ``compile_filter`` exports the finished BPF program. The
forked child then needs one ``prctl(PR_SET_SECCOMP)`` and nothing else -- no allocation, no
library state, which matters because ``preexec_fn`` runs between fork and exec.
"""

from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass
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
    """A compiled BPF program, held in ctypes memory the child can pass straight to the kernel."""

    bpf: bytes
    _buffer: Any = None
    _fprog: Any = None

    def __post_init__(self) -> None:
        count = len(self.bpf) // ctypes.sizeof(_SockFilter)
        self._buffer = (_SockFilter * count).from_buffer_copy(self.bpf)
        self._fprog = _SockFprog(count, ctypes.cast(self._buffer, ctypes.POINTER(_SockFilter)))

    @property
    def instructions(self) -> int:
        return len(self.bpf) // ctypes.sizeof(_SockFilter)


_libc = ctypes.CDLL(None, use_errno=True)
_prctl = getattr(_libc, "prctl", None)  # absent on macOS, where nothing here is ever called
if _prctl is not None:
    _prctl.restype = ctypes.c_int


def _syscall_exists(module: Any, name: str) -> bool:
    try:
        return module.resolve_syscall(module.Arch.NATIVE, name) >= 0
    except Exception:  # unknown to this libseccomp version / arch
        return False


def compile_filter(table: "SeccompTable", module: Any | None = None) -> Program:
    """Build the filter for ``table`` with libseccomp and export it as BPF (raises OSError)."""
    sc = module or load_module()
    if sc is None:
        raise OSError(errno.ENOSYS, "libseccomp is not available (install libseccomp2 and pyseccomp)")
    flt = sc.SyscallFilter(sc.ALLOW)
    for name, err in table.errno_syscalls:
        if _syscall_exists(sc, name):
            flt.add_rule(sc.ERRNO(err), name)
    for name, index, value, err in table.errno_arg_equal:
        if _syscall_exists(sc, name):
            flt.add_rule(sc.ERRNO(err), name, sc.Arg(index, sc.MASKED_EQ, 0xFFFFFFFF, value))
    for name, index, mask, value, err in table.errno_arg_masked:
        if _syscall_exists(sc, name):
            flt.add_rule(sc.ERRNO(err), name, sc.Arg(index, sc.MASKED_EQ, mask, value))
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
    return Program(b"".join(chunks))


def install(program: Program) -> None:
    """Child side: no_new_privs (required for an unprivileged filter), then load the BPF."""
    ctypes.set_errno(0)
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp prctl(NO_NEW_PRIVS): {os.strerror(err)}")
    if _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program._fprog), 0, 0) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp prctl(SET_SECCOMP): {os.strerror(err)}")
