"""The thin applier: start one sandboxed subprocess.

Kernel objects are built once per session in the parent (``prepare``): the Landlock ruleset fd, the
compiled seccomp BPF, the open ``cgroup.procs`` files, the mount-namespace fd. The ``preexec_fn`` between fork and exec
then only issues syscalls, in the order environment.md section 0 verified:

  1. join the cgroup(s)      -- while still root: cgroup.procs is root-owned
  2. set the rlimits         -- hard, cur == max
  2b. (root only) join the session's mount namespace, where the workdir is noexec,nosuid,nodev
  3. drop to the sandbox uid -- setgroups([]), setgid, setuid (root only); caps vanish with uid 0
  4. Landlock restrict_self  -- sets no_new_privs first
  5. seccomp, last           -- so the steps above are not themselves filtered

Step 2b closes what Landlock cannot: its EXECUTE right governs execve, not mmap(PROT_EXEC), so
the (necessarily executable) ELF loader could otherwise run a binary copied into the workdir
(``/lib64/ld-linux-x86-64.so.2 ./copied``). On a noexec mount the kernel refuses both.

A failing step is reported by name through a CLOEXEC pipe instead of Python's bare
"Exception occurred in preexec_fn" (upstream PR #24 fixed the same opacity).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from dataclasses import dataclass, field
from typing import IO, Any, Mapping, Sequence

from mur.sandbox import landlock, rlimits, seccomp
from mur.sandbox.cgroups import SessionCgroup
from mur.sandbox.policy import ShellPolicy

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 32, 4096, 16384, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)


def _ccheck(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def remount_noexec(path: bytes) -> None:
    """Private mount namespace, then ``path`` bind-mounted onto itself noexec,nosuid,nodev."""
    _ccheck(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _ccheck(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount(/, MS_PRIVATE)")
    _ccheck(_libc.mount(path, path, None, MS_BIND | MS_REC, None), "bind mount of the workdir")
    _ccheck(_libc.mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOEXEC | MS_NOSUID | MS_NODEV, None),
            "remount of the workdir noexec")


def noexec_namespace(path: str) -> int | None:
    """An fd holding a mount namespace in which ``path`` is noexec; None when we cannot make one.

    Built once per session by a short-lived child; the nsfs fd keeps the namespace alive after it
    exits, so each tool only pays a cheap setns() (creating and tearing down a namespace per call
    costs ~10 ms of RCU synchronisation), and closing the fd at session end frees it.
    """
    status_r, status_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(status_r)
            os.close(hold_w)
            try:
                remount_noexec(os.fsencode(path))
                os.write(status_w, b"1")
            except BaseException:
                os.write(status_w, b"0")
            os.read(hold_r, 1)  # stay alive until the parent has opened our namespace
        finally:
            os._exit(0)
    os.close(status_w)
    os.close(hold_r)
    fd = None
    try:
        if os.read(status_r, 1) == b"1":
            fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        fd = None
    finally:
        os.close(status_r)
        os.close(hold_w)
        os.waitpid(pid, 0)
    return fd


def enter_namespace(fd: int, cwd: bytes) -> None:
    """Child side: join the session's mount namespace, then re-enter the workdir through it."""
    _ccheck(_libc.setns(fd, CLONE_NEWNS), "setns(CLONE_NEWNS)")
    os.chdir(cwd)  # setns resets the cwd; the inherited one pointed into the exec-able mount anyway


class SpawnError(Exception):
    """The sandbox could not be applied in the child; ``str()`` names the step and the errno."""


@dataclass
class Prepared:
    """Per-session kernel state the children inherit."""

    policy: ShellPolicy
    ruleset: landlock.Ruleset | None = None
    program: seccomp.Program | None = None
    cgroup_fds: list[int] = field(default_factory=list)
    mountns_fd: int | None = None  # from noexec_namespace(), owned (closed) by us

    def close(self) -> None:
        if self.ruleset is not None:
            self.ruleset.close()
            self.ruleset = None
        if self.mountns_fd is not None:
            os.close(self.mountns_fd)
            self.mountns_fd = None
        for fd in self.cgroup_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.cgroup_fds = []


def prepare(policy: ShellPolicy, cgroup: SessionCgroup | None, mountns_fd: int | None = None) -> Prepared:
    """Build the ruleset, compile the filter and open the cgroup files (raises OSError)."""
    prepared = Prepared(policy, mountns_fd=mountns_fd if policy.noexec_workdir else None)
    if mountns_fd is not None and prepared.mountns_fd is None:
        os.close(mountns_fd)
    try:
        ll = policy.landlock
        if ll is not None:
            prepared.ruleset = landlock.build_ruleset(
                ll.abi, ll.handled_fs, [(g.path, g.access) for g in ll.grants],
                handled_net=ll.handled_net, tcp_connect=ll.tcp_connect, tcp_bind=(), scoped=ll.scoped,
            )
        if policy.seccomp is not None:
            prepared.program = seccomp.compile_filter(policy.seccomp)
        if cgroup is not None:
            for path in cgroup.procs_files:
                prepared.cgroup_fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
    except BaseException:
        prepared.close()
        raise
    return prepared


def _preexec(prepared: Prepared, report_fd: int):
    ruleset_fd = prepared.ruleset.fd if prepared.ruleset is not None else None
    program = prepared.program
    limits = prepared.policy.rlimits
    run_as = prepared.policy.run_as
    noexec = os.fsencode(prepared.policy.noexec_workdir) if prepared.policy.noexec_workdir else None
    mountns_fd = prepared.mountns_fd
    cgroup_fds = list(prepared.cgroup_fds)

    def child() -> None:
        step = "joining the cgroup"
        try:
            pid = str(os.getpid()).encode()
            for fd in cgroup_fds:
                os.write(fd, pid)
            step = "setting rlimits"
            rlimits.apply(limits)
            if noexec is not None and mountns_fd is not None:
                step = "entering the noexec mount namespace"
                enter_namespace(mountns_fd, noexec)
            if run_as is not None:
                step = f"dropping to uid {run_as[0]}"
                os.setgroups([])
                os.setresgid(run_as[1], run_as[1], run_as[1])
                os.setresuid(run_as[0], run_as[0], run_as[0])
            if ruleset_fd is not None:
                step = "applying Landlock"
                landlock.restrict_self(ruleset_fd)
            if program is not None:
                step = "installing the seccomp filter"
                seccomp.install(program)
        except BaseException as exc:
            try:
                os.write(report_fd, f"{step}: {exc}".encode(errors="replace")[:1000])
            except OSError:
                pass
            raise

    return child


def spawn(argv: Sequence[str], *, executable: str, env: Mapping[str, str], cwd: str, prepared: Prepared,
          stdin: Any = subprocess.DEVNULL, stdout: IO[bytes] | int | None = subprocess.PIPE,
          stderr: IO[bytes] | int | None = subprocess.PIPE) -> subprocess.Popen:
    """Start ``argv`` under the prepared sandbox, in its own session (so it can be killed as a group)."""
    report_r, report_w = os.pipe()  # non-inheritable (O_CLOEXEC) since Python 3.4
    try:
        try:
            return subprocess.Popen(
                list(argv), executable=executable, env=dict(env), cwd=cwd, stdin=stdin, stdout=stdout,
                stderr=stderr, close_fds=True, start_new_session=True,
                preexec_fn=_preexec(prepared, report_w),
            )
        except subprocess.SubprocessError as exc:
            os.close(report_w)
            report_w = -1
            detail = os.read(report_r, 1000).decode(errors="replace") or str(exc)
            raise SpawnError(detail) from exc
    finally:
        if report_w >= 0:
            os.close(report_w)
        os.close(report_r)
