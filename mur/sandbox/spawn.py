"""The thin applier: start one sandboxed subprocess.

Kernel objects are built once per session in the parent (``prepare``): the Landlock ruleset fd, the
compiled seccomp programs, the open ``cgroup.procs`` files, and the session's namespaces
(``namespaces.py``). The ``preexec_fn`` between fork and exec then only issues syscalls, in the
order environment.md section 0 verified:

  1. join the cgroup(s)      -- while still root: cgroup.procs is root-owned
  2. set the rlimits         -- hard, cur == max (and, in a cgroup shared with mur, oom_score_adj 1000)
  3. join the namespaces     -- setns(): user first (when mur is not root: it grants the rest), then
                                net, ipc, mnt (the noexec workdir; re-enter the cwd through it), pid
  3b. (pid namespace only) fork once more: setns(pid) only moves the caller's *children*, so the
                                child waits for its own child -- the tool, pid 2+ in the namespace --
                                and leaves with the tool's exit status or signal
  4. drop to the session uid -- setgroups([]), setgid, setuid (root only); caps vanish with uid 0
  5. Landlock restrict_self  -- sets no_new_privs first
  6. seccomp, last           -- so the steps above are not themselves filtered

A failing step is reported by name through a CLOEXEC pipe instead of Python's bare
"Exception occurred in preexec_fn" (upstream PR #24 fixed the same opacity).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from dataclasses import dataclass, field
from typing import IO, Any, Mapping, Sequence

from mur.sandbox import landlock, rlimits, seccomp
from mur.sandbox.cgroups import SessionCgroup
from mur.sandbox.namespaces import CLONE_NEWNS, CLONE_NEWPID, SessionNamespaces
from mur.sandbox.policy import ShellPolicy

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int, flag: int) -> None:
    if _libc.setns(fd, flag) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns({flag:#x}): {os.strerror(err)}")


def _stand_in(child: int) -> None:
    """The pid-namespace step's outer process: wait for the tool, then end exactly as it did."""
    os.closerange(0, 65536)  # nothing of ours may keep the caller's pipes (or its exec error pipe) open
    while True:
        try:
            _pid, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset (it would raise)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


class SpawnError(Exception):
    """The sandbox could not be applied in the child; ``str()`` names the step and the errno."""


@dataclass
class Prepared:
    """Per-session kernel state the children inherit."""

    policy: ShellPolicy
    ruleset: landlock.Ruleset | None = None
    program: seccomp.Program | None = None
    cgroup_fds: list[int] = field(default_factory=list)
    namespaces: SessionNamespaces | None = None  # owned by the caller (ShellSandbox), not closed here

    def close(self) -> None:
        if self.ruleset is not None:
            self.ruleset.close()
            self.ruleset = None
        for fd in self.cgroup_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.cgroup_fds = []


def prepare(policy: ShellPolicy, cgroup: SessionCgroup | None,
            namespaces: SessionNamespaces | None = None) -> Prepared:
    """Build the ruleset, compile the filters and open the cgroup files (raises OSError)."""
    prepared = Prepared(policy, namespaces=namespaces)
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


def _preexec(prepared: Prepared, report_fd: int, cwd: str):
    ruleset_fd = prepared.ruleset.fd if prepared.ruleset is not None else None
    program = prepared.program
    limits = prepared.policy.rlimits
    run_as = prepared.policy.run_as
    joins = prepared.namespaces.join_order() if prepared.namespaces is not None else []
    cwd_b = os.fsencode(cwd)
    cgroup_fds = list(prepared.cgroup_fds)
    oom_adj = str(prepared.policy.oom_score_adj).encode() if prepared.policy.oom_score_adj is not None else None

    def child() -> None:
        step = "joining the cgroup"
        try:
            pid = str(os.getpid()).encode()
            for fd in cgroup_fds:
                os.write(fd, pid)
            step = "setting rlimits"
            rlimits.apply(limits)
            if oom_adj is not None:  # a cgroup shared with mur: the tool, never mur, is the OOM killer's pick
                step = "raising oom_score_adj"
                fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, oom_adj)
                finally:
                    os.close(fd)
            for fd, flag in joins:
                step = f"joining the session's namespaces ({flag:#x})"
                _setns(fd, flag)
                if flag == CLONE_NEWNS:
                    os.chdir(cwd_b)  # setns resets the cwd; the inherited one was on the exec-able mount
                elif flag == CLONE_NEWPID:
                    step = "forking into the pid namespace"
                    inner = os.fork()
                    if inner != 0:
                        _stand_in(inner)
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
                preexec_fn=_preexec(prepared, report_w, cwd),
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
