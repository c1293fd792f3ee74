"""The thin applier: start sandboxed subprocesses through the session's spawner.

Kernel objects are built once per session in the parent (``prepare``): the compiled seccomp
programs, the open ``cgroup.procs`` files, and the session's namespaces (``namespaces.py``); the
spawner builds the Landlock ruleset itself, in the tools' mount namespace, from the policy's grants. ``Spawner`` then starts the session's spawner (``zygote.py``): a small fresh
interpreter that joins the cgroup and the namespaces, drops to the session uid, applies Landlock
and seccomp to itself once, and ``posix_spawn``s every tool from there (a fork + rlimits + exec only
under limits too tight for the interpreter), so a call costs a vfork + exec and a round trip on a
socket instead of a fork of mur, a cgroup migration and the whole sandbox set-up; see zygote.py
for the order.

A step that fails (at start-up, or in a child) is reported by name instead of Python's bare
"Exception occurred in preexec_fn" (upstream PR #24 fixed the same opacity). A spawner that died
(a tool sharing its uid killed it, say) is started again before the next call.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from mur.sandbox import seccomp, zygote
from mur.sandbox.cgroups import SessionCgroup
from mur.sandbox.namespaces import SessionNamespaces
from mur.sandbox.policy import ShellPolicy

START_TIMEOUT = 60.0  # a fresh interpreter on a loaded machine; once per session
ANSWER_TIMEOUT = 30.0  # fork + exec of one tool, or its exit report once the pidfd fired
SPAWNER_FLAG = "--mur-sandbox-spawner"  # how a frozen (PyInstaller) mur starts zygote.main


class SpawnError(Exception):
    """The sandbox could not be applied; ``str()`` names the step and the errno."""


class _Gone(Exception):
    """The spawner died before answering a request."""


@dataclass
class Prepared:
    """Per-session kernel state the children inherit."""

    policy: ShellPolicy
    program: seccomp.Program | None = None
    cgroup_fds: list[int] = field(default_factory=list)
    namespaces: SessionNamespaces | None = None  # owned by the caller (ShellSandbox), not closed here

    def close(self) -> None:
        for fd in self.cgroup_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.cgroup_fds = []


def prepare(policy: ShellPolicy, cgroup: SessionCgroup | None,
            namespaces: SessionNamespaces | None = None) -> Prepared:
    """Compile the filters and open the cgroup files (raises OSError)."""
    prepared = Prepared(policy, namespaces=namespaces)
    try:
        if policy.seccomp is not None:
            prepared.program = seccomp.compile_filter(policy.seccomp)
        if cgroup is not None:
            for path in cgroup.procs_files:
                prepared.cgroup_fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
    except BaseException:
        prepared.close()
        raise
    return prepared


def _boot_argv(ctl_fd: int) -> list[str]:
    """The spawner's command line: this interpreter, isolated and without site, running zygote.main."""
    if getattr(sys, "frozen", False):  # a PyInstaller runtime: the mur binary itself dispatches
        return [sys.executable, SPAWNER_FLAG, str(ctl_fd)]
    root = str(Path(zygote.__file__).resolve().parents[2])
    boot = f"import sys; sys.path.insert(0, {root!r}); from mur.sandbox.zygote import main; main()"
    return [sys.executable, "-I", "-S", "-c", boot, str(ctl_fd)]


@dataclass
class Call:
    """One running tool: its pid (a process group of its own), our ends of its pipes, and the fd
    that turns readable when the spawner reports its exit."""

    pid: int
    stdout: int
    stderr: int
    stdin: int | None
    exit_fd: int
    spawner: "Spawner"
    returncode: int | None = None
    cpu_seconds: float = 0.0
    lost: bool = False  # the spawner died before reporting: the group was killed, the status is unknown

    def reap(self) -> None:
        """Read the exit report (call when ``exit_fd`` is readable); sets returncode."""
        if self.returncode is not None:
            return
        report = self.spawner._answer()
        if report is None or "status" not in report:
            self.abandon()
            return
        self.returncode = os.waitstatus_to_exitcode(report["status"])
        self.cpu_seconds = float(report.get("cpu", 0.0))
        self.spawner._used(float(report.get("spawner_cpu", 0.0)))

    def abandon(self) -> None:
        """The spawner cannot say how the tool ended: kill its group and the spawner (restarted later)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.spawner._stop()
        self.returncode, self.lost = -signal.SIGKILL, True


class Spawner:
    """The session's spawner process, started on demand, restarted when it died."""

    def __init__(self, prepared: Prepared, cwd: str) -> None:
        self.prepared = prepared
        self.cwd = cwd
        self.starts = 0
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._retire = False
        limits = dict(prepared.policy.rlimits)
        # the spawner carries RLIMIT_CPU itself: started afresh once it has used half of it
        self._cpu_budget = limits["CPU"] / 2 if limits.get("CPU", -1) > 0 and zygote.carries_limits(
            prepared.policy.rlimits) else None

    @property
    def pid(self) -> int | None:
        """The spawner's pid while it runs (it lives in the session cgroup, beside the tools)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the spawner and apply the sandbox to it (raises SpawnError naming the step)."""
        self._stop()
        p = self.prepared
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        joins = p.namespaces.join_order() if p.namespaces is not None else []
        keep = [theirs.fileno(), *p.cgroup_fds, *(fd for fd, _flag in joins)]
        ll = p.policy.landlock
        try:
            self._proc = subprocess.Popen(
                _boot_argv(theirs.fileno()), pass_fds=keep, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
                env=dict(os.environ) if getattr(sys, "frozen", False) else {},
            )
        except OSError as exc:
            ours.close()
            raise SpawnError(f"starting the spawner ({sys.executable}): {exc}") from exc
        finally:
            theirs.close()
        self._sock = ours
        self._retire = False
        self.starts += 1
        ours.settimeout(START_TIMEOUT)
        try:
            zygote.send(ours, {
                "cgroup_fds": list(p.cgroup_fds), "joins": [[fd, flag] for fd, flag in joins], "cwd": self.cwd,
                "run_as": list(p.policy.run_as) if p.policy.run_as is not None else None,
                "landlock": None if ll is None else {
                    "abi": ll.abi, "handled_fs": ll.handled_fs, "grants": [[g.path, g.access] for g in ll.grants],
                    "handled_net": ll.handled_net, "tcp_connect": list(ll.tcp_connect), "scoped": ll.scoped},
                "bpf": [blob.hex() for blob in p.program.bpf] if p.program is not None else [],
                "rlimits": [list(item) for item in p.policy.rlimits], "carry": zygote.carries_limits(p.policy.rlimits),
                "oom_score_adj": p.policy.oom_score_adj,
            })
            reply, _ = zygote.recv(ours)
        except (OSError, ValueError) as exc:
            self._stop()
            raise SpawnError(f"the spawner did not start: {exc}") from exc
        if reply is None or "ready" not in reply:
            code = self._stop()
            raise SpawnError(reply["error"] if reply and "error" in reply else f"the spawner exited (status {code})")
        ours.settimeout(ANSWER_TIMEOUT)

    def run(self, argv: Sequence[str], *, executable: str, env: Mapping[str, str], stdin: bool) -> Call:
        """Start one tool in its own process group. Raises OSError when the exec itself failed
        (missing, not executable), SpawnError when the sandbox could not be applied."""
        for _attempt in (1, 2):
            if self._retire or not self._alive():
                self.start()
            call = self._request(argv, executable, env, stdin)
            if call is not None:
                return call
            # it died before answering (a session daemon sharing its uid killed it between calls,
            # and _alive() saw it still running): the request started nothing; once more, afresh
        raise SpawnError("the spawner exited before starting the tool")

    def _request(self, argv: Sequence[str], executable: str, env: Mapping[str, str], stdin: bool) -> Call | None:
        assert self._proc is not None and self._sock is not None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if stdin else (self._devnull, None)
        try:
            try:
                os.kill(self._proc.pid, signal.SIGCONT)  # a tool sharing its uid may have stopped it
                zygote.send(self._sock, {"path": executable, "argv": list(argv), "env": dict(env)}, [in_r, out_w, err_w])
                reply = self._answer()
            except OSError:  # EPIPE, ESRCH: gone
                self._stop()
                reply = None
            finally:
                for fd in (out_w, err_w) + ((in_r,) if stdin else ()):
                    os.close(fd)
            if reply is None or "pid" not in reply:
                failed = (reply or {}).get("failed")
                if failed is None:
                    self._stop()
                    raise _Gone()
                if failed["step"] == "exec":
                    raise OSError(failed["errno"] or 0, failed["message"])
                raise SpawnError(f"{failed['step']}: {failed['message']}")
        except BaseException as exc:
            for fd in (out_r, err_r) + ((in_w,) if in_w is not None else ()):
                os.close(fd)
            if isinstance(exc, _Gone):
                return None
            raise
        assert self._sock is not None
        return Call(reply["pid"], out_r, err_r, in_w, self._sock.fileno(), self)

    def close(self) -> None:
        self._stop()
        if self._devnull >= 0:
            os.close(self._devnull)
            self._devnull = -1

    # internals ----------------------------------------------------------------------------------

    def _answer(self) -> dict | None:
        try:
            reply, _ = zygote.recv(self._sock) if self._sock is not None else (None, [])
        except (OSError, ValueError):  # a timeout included: a spawner that does not answer is dead to us
            reply = None
        if reply is None:
            self._stop()
        return reply

    def _used(self, cpu_seconds: float) -> None:
        if self._cpu_budget is not None and cpu_seconds >= self._cpu_budget:
            self._retire = True

    def _alive(self) -> bool:
        if self._proc is None or self._sock is None or self._proc.poll() is not None:
            return False
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN | select.POLLHUP)
        return not poller.poll(0)  # between calls the spawner never writes: readable means it hung up

    def _stop(self) -> int | None:
        """Kill and reap the spawner (if any); returns its exit status."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        return proc.wait()
