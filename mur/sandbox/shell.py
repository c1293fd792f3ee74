"""Shell tools: run a ``capabilities.shell.allow`` binary inside the kernel sandbox.

One ``ShellSandbox`` per session owns the session's cgroup(s), its namespaces (the tools' composed
root and the session disk in it), the spawner carrying Landlock and seccomp, the egress proxy, the
disk ceiling's guard and (as root) the uid lease and its access grants. ``start`` measures
(``SessionFacts``), decides the whole policy (mur.sandbox.decide), then applies it; ``close`` ends
every process, brings the tools' files back from the session disk (mirror.copy_out), and undoes the
rest.
``run`` serves both callers: the agent loop's ``{"command": "..."}`` form and the guest import
``murmur:shell/execute`` ``run(binary, args, env)`` form.

Runs are serialized: the cgroup's oom_kill / pids.max counters are read before and after each run,
and only a serialized run makes "this run hit that limit" a fact rather than a guess.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from mur import fsafe
from mur.errors import MurError
from mur.fsafe import Tree
from mur.sandbox import cgroups, isolation, namespaces, policy as pol, tree, uids
from mur.sandbox.access import WorkdirAccess
from mur.sandbox.binaries import Binary, call_argv, resolve
from mur.sandbox.ceiling import Ceiling
from mur.sandbox.decide import decide
from mur.sandbox.facts import gather
from mur.sandbox.disk import HeldDisk
from mur.sandbox.egress import EgressProxy, system_resolve
from mur.sandbox.enclosing import EnclosingCgroup
from mur.sandbox.launch_warnings import launch_warnings
from mur.sandbox.output import OUTPUT_LIMIT, Capture, cut, open_trees, readonly_dirs, write_log
from mur.sandbox.probe import HostProbe, probe_host
from mur.sandbox.pump import killpg, pump
from mur.sandbox.result import ShellResult, attribute, limit_error, shell_trace_fields
from mur.sandbox.spawn import Prepared, SpawnError, Spawner, prepare
from mur.sandbox.tool_env import (BASELINE_ENV, CAPSULE_HOME, call_env, session_env, shell_env,
                                  synthetic_tool_manifest, write_synthetic_tool_manifests)

__all__ = [
    "BASELINE_ENV", "CAPSULE_HOME", "OUTPUT_LIMIT", "ShellResult", "ShellSandbox", "attribute", "limit_error",
    "shell_env", "shell_trace_fields", "synthetic_tool_manifest", "write_synthetic_tool_manifests",
]


# --- the sandbox ------------------------------------------------------------------------------

MAX_DECISIONS = 6  # decide, apply, and on an applier's failure decide again: at most this often


class ShellSandbox:
    """One per session. Owns the session's cgroup(s), uid lease, namespaces, session disk, egress
    proxy and the disk ceiling's guard. ``caps`` is a ``mur.manifest.capsule.Capabilities``,
    ``network_allow`` its parsed ``AllowEntry`` list (duck-typed: the sandbox package does not import
    the manifest's).

    ``resolve(host) -> [address, ...]`` is how network.allow hosts are looked up, at launch (a host
    that does not resolve is skipped, as the spec says) and by the egress proxy at connect time;
    tests inject one that maps test names to loopback. ``state_dir``: a directory of the runtime's
    own for the session disk's image and a private /tmp without a disk (mur run: the session
    directory; else one is made and removed). ``require_sealed``: E-RUN-014 rather than a weaker
    view when the composed root cannot be built (a declared ``sealed`` floor).
    """

    def __init__(self, caps: Any, workdir: Path, session_id: str,
                 network_allow: list[Any], probe: HostProbe | None = None,
                 log: Callable[[str], None] | None = None, *,
                 host_env: Mapping[str, str] | None = None,
                 on_workdir_exceeded: Callable[[MurError], None] | None = None,
                 resolve: Callable[[str], list[str]] | None = None, logs_dir: Path | None = None,
                 state_dir: Path | None = None, require_sealed: bool = False) -> None:
        self.caps = caps
        self.workdir = Path(os.path.realpath(workdir))
        # Full shell output goes here. mur run passes the session's logs/, outside the workdir, which
        # the tools may read but not write; standalone, it is <workdir>/logs.
        self.logs_dir = Path(os.path.abspath(logs_dir)) if logs_dir is not None else None
        self.session_id = session_id
        self.network_allow = list(network_allow)
        self.probe = probe
        self.log = log or (lambda _msg: None)
        self.host_env = dict(os.environ if host_env is None else host_env)
        self.on_workdir_exceeded = on_workdir_exceeded
        self.resolve = resolve or system_resolve
        self.require_sealed = require_sealed
        self.policy: pol.ShellPolicy | None = None
        self.cgroup: cgroups.SessionCgroup | EnclosingCgroup | None = None
        self.binaries: dict[str, Binary] = {}
        self.live_workdir = self.workdir  # the tools' tree as the runtime reaches it (the session disk, when any)
        self.disk: HeldDisk | None = None
        self.ceiling = Ceiling(self)
        self._prepared: Prepared | None = None
        self._spawner: Spawner | None = None
        self._access: WorkdirAccess | None = None
        self._exceeded: MurError | None = None
        self._lock = threading.Lock()  # serializes runs (attribution needs it)
        self._close_lock = threading.Lock()
        self._started = False
        self._closed = False
        self._children: set[int] = set()
        self._captures: tuple[Capture, ...] = ()  # the running call's output streams
        self._lease: uids.UidLease | None = None
        self.namespaces: namespaces.SessionNamespaces | None = None
        self.proxy: EgressProxy | None = None
        self._work: Tree | None = None  # the tools' workdir, held open: every runtime access goes through it
        self._logs: Tree | None = None
        self._base_env: dict[str, str] = {}
        self._state = state_dir

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> list[tuple[str, str]]:
        """Measure, decide, apply (E-RUN-012 without an aggregate bound on Linux); returns the
        launch warnings [(code, message)] (W-SEC-001/002/003/005/010)."""
        if self._started:
            raise MurError("E-RUN-015", "the shell sandbox was already started")
        self._started = True
        probe = self.probe = self.probe or probe_host()
        try:
            try:
                self.workdir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise MurError("E-IO-003", f"cannot create the workdir {self.workdir}: {exc.strerror}") from exc
            self.workdir = Path(os.path.realpath(self.workdir))
            self.live_workdir = self.workdir
            self._state = self.ceiling.state_dir(self._state)
            facts = gather(self, probe)
            last = ""
            for _ in range(MAX_DECISIONS):
                # An empty allow list still gets the cgroup (and E-RUN-012): the runtime also starts the
                # sandbox for spawn.allow / native-artifact capsules, which the spec bounds the same way.
                self.policy = decide(self.caps, self.network_allow, facts)
                try:
                    self._apply(self.policy)
                    break
                except isolation.Replan as again:
                    self._unapply()
                    last = again.message
                    facts = again.update(facts)
                    self.log(f"shell sandbox: {again.message}; deciding again without it")
            else:
                raise MurError("E-RUN-015", f"the shell sandbox could not be set up: {last}")
            policy = self.policy
            if self.require_sealed and policy.view is None:
                raise MurError("E-RUN-014", f"the sealed composed root could not be built: {policy.view_reason}",
                               "run where `mur run --explain-scope` reports sealed, or lower the containment floor")
            for host in policy.network.tcp.skipped:
                self.log(f"network.allow host '{host}' did not resolve at launch: it contributes nothing")
            self.log(f"shell sandbox: network {policy.network.mechanism}, processes {policy.processes}, "
                     f"namespaces {'+'.join(policy.namespaces) or 'none'}, view {policy.host_view}, "
                     f"disk {policy.disk.mechanism if policy.disk else 'none'}")
            if policy.view_reason:
                self.log(f"shell sandbox: the tools see the host's tree: {policy.view_reason}")
            if policy.disk is not None and policy.disk.reason:
                self.log(f"shell sandbox: the workdir ceiling is not kernel-counted: {policy.disk.reason}")
            atexit.register(self.close)
        except BaseException:
            self.close()
            raise
        return launch_warnings(self.caps, self.probe, self.policy)

    def _apply(self, policy: pol.ShellPolicy) -> None:
        """Make what ``policy`` names, in order; isolation.Replan when a part cannot be made."""
        linux = self.probe is not None and self.probe.os == "linux"
        if linux and self.cgroup is None:
            self.cgroup = isolation.apply_cgroup(policy, self.caps, self.session_id, str(self.workdir),
                                                 log=self.log, waited_for=self._waited_for)
        self.namespaces, self.disk = self.ceiling.make(policy)
        if self.disk is not None:
            self.live_workdir = Path(str(self.namespaces.live_root) + str(self.workdir))  # type: ignore[union-attr]
        self._open_trees()
        run_as = policy.run_as
        if run_as is not None:
            self._access = WorkdirAccess(str(self.live_workdir), *run_as, readonly=self._readonly(),
                                         ancestor_grants=policy.view is None)
            try:
                self._access.grant()
            except OSError as exc:
                raise MurError("E-RUN-015", f"cannot give the session uid {run_as[0]} access to the "
                               f"workdir {self.workdir}: {exc}") from exc
            for note in self._access.notes:
                self.log(f"workdir access: {note}")
        self._base_env = session_env(self.caps, self.workdir, self.host_env, policy.network)
        if policy.view is not None and policy.view.tmp is not None:
            for name in ("TMPDIR", "TMP", "TEMP"):  # the view's private /tmp: the host's TMPDIR does not exist there
                self._base_env[name] = policy.view.tmp
        try:
            self._prepared = prepare(policy, self.cgroup, self.namespaces)
        except OSError as exc:
            raise MurError("E-RUN-015", f"the shell sandbox could not be prepared: {exc}") from exc
        self._spawner = Spawner(self._prepared, str(self.workdir))
        try:
            self._spawner.start()
        except SpawnError as exc:
            raise MurError("E-RUN-015", f"the shell sandbox could not be applied: {exc}") from exc
        if policy.network.proxy and self.namespaces is not None and self.namespaces.listener is not None:
            self.proxy = EgressProxy(self.namespaces.listener, policy.network.allow, resolve=self.resolve, log=self.log)
            self.proxy.start()
        self.ceiling.guard(policy)

    def _unapply(self) -> None:
        """Undo a partial ``_apply`` before deciding again (the cgroup and the uid lease stay)."""
        self.ceiling.stop()
        if self._spawner is not None:
            self._spawner.close()
            self._spawner = None
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        if self._prepared is not None:
            self._prepared.close()
            self._prepared = None
        if self._access is not None:
            try:
                self._access.revoke()
            except OSError:
                pass
            self._access = None
        if self.namespaces is not None:
            self.namespaces.close()
            self.namespaces = None
        if self.disk is not None:
            self.disk.close()
            self.disk = None
        self.ceiling.discard(final=False)
        self.live_workdir = self.workdir
        self._close_trees()

    def close(self) -> None:
        """Kill every process, bring the tools' files back from the session disk, remove the
        cgroup(s), undo the grants; idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        self.ceiling.stop()
        for pgid in list(self._children):
            killpg(pgid)
        if self._spawner is not None:
            self._spawner.close()
        if self.proxy is not None:
            self.proxy.close()
        if self.cgroup is not None:
            try:
                self.cgroup.remove()
            except OSError as exc:
                self.log(f"cgroup cleanup failed: {exc}")
        if self._prepared is not None:
            self._prepared.close()
        if self.namespaces is not None:
            self.namespaces.close()  # every process of the session is gone now: the disk is still
        self.ceiling.bring_back()  # held by fd, and no tool writes it any more
        if self._access is not None:
            try:
                self._access.revoke()
            except OSError as exc:
                self.log(f"workdir access cleanup failed: {exc}")
        if self._lease is not None:
            self._lease.release()
        self._close_trees()
        self.ceiling.discard()

    def _open_trees(self) -> None:
        try:
            self._work, self._logs = open_trees(self.live_workdir, self.logs_dir)
        except OSError as exc:
            raise MurError("E-IO-003", f"cannot open the workdir {self.workdir} or its logs: {exc}") from exc
        self.logs_dir = self._logs.path

    def _close_trees(self) -> None:
        for held in (self._work, self._logs):
            if held is not None:
                held.close()
        self._work = self._logs = None

    def _readonly(self) -> tuple[str, ...]:
        return readonly_dirs(self.live_workdir, self.logs_dir)

    def __enter__(self) -> "ShellSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tool_pids(self) -> set[int]:
        """The pids in the session cgroup(s) other than the spawner's: what the tools left running."""
        pids = self.cgroup.pids() if self.cgroup is not None else set()
        return pids - {self._spawner.pid} if self._spawner is not None else pids

    def workdir_exceeded(self) -> MurError | None:
        """E-RUN-013 once the guard saw the workdir reach workdir_max_bytes; with a session disk a
        fresh reading first (guest tools write it too, between the guard's ticks)."""
        if self._exceeded is None and self._started and not self._closed:
            self.ceiling.after_call()
        return self._exceeded

    def shown(self, path: str | None) -> str | None:
        """A path under the live workdir as tools (and the model) name it: under the workdir itself."""
        live = str(self.live_workdir)
        if path is None or live == str(self.workdir) or not (path == live or path.startswith(live + "/")):
            return path
        return str(self.workdir) + path[len(live):]

    # running ----------------------------------------------------------------------------------

    def run(self, binary: str, command: str | None = None, args: list[str] | None = None,
            env: Iterable[tuple[str, str]] = (), timeout: float | None = None,
            stdin: bytes | None = None) -> ShellResult:
        """Run an allowed binary: ``command`` (agent-loop form) or ``args`` (guest import form)."""
        if binary not in self.caps.shell_allow:
            raise MurError("E-RUN-015", f"shell binary '{binary}' is not in capabilities.shell.allow",
                           "add it to capabilities.shell.allow in murmur.yaml")
        if not self._started or self._closed or self._spawner is None:
            raise MurError("E-RUN-015", "the shell sandbox is not running (start() not called, or closed)")
        if self._exceeded is not None:
            raise self._exceeded
        info = self.binaries[binary]
        argv, text = call_argv(info, command, args)
        if info.path is None:
            return self._refused(info, text, 127, f"mur: {binary}: not found on PATH\n")
        run_env = call_env(self._base_env, self.caps, dict(env))
        limit = self.caps.limits.deadline_seconds if timeout is None else timeout
        with self._lock:
            try:
                assert self._work is not None
                os.close(self._work.own_dir(CAPSULE_HOME))
                return self._run_locked(info, argv, text, run_env, limit, stdin)
            except fsafe.LinkRefused as exc:
                return self._refused(info, text, 126, f"mur: {exc.filename}: {exc.strerror}: the runtime does not "
                                     "follow links it finds in the workdir\n")
            except OSError as exc:  # the workdir itself failing us (deleted, disk full, ...)
                raise MurError("E-IO-003", f"shell tool '{binary}': {exc}") from exc

    def _run_locked(self, info: Binary, argv: list[str], text: str, env: dict[str, str], timeout: float,
                    stdin: bytes | None) -> ShellResult:
        before = self.cgroup.evidence() if self.cgroup else (0, 0)
        logs = self._logs
        assert logs is not None
        cap = self.caps.resources.workdir_max_bytes
        out, err = Capture(logs, cap), Capture(logs, cap)
        self._captures = (out, err)
        began = time.monotonic()
        assert self._spawner is not None
        try:
            call = self._spawner.run(argv, executable=info.path, env=env, stdin=stdin is not None)
        except SpawnError as exc:
            raise MurError("E-RUN-015", f"the shell sandbox could not be applied to '{info.name}': {exc}") from exc
        except OSError as exc:
            return self._refused(info, text, 126, f"mur: cannot execute {info.path}: {exc.strerror or exc}\n")
        self._children.add(call.pid)
        try:
            timed_out = pump(call, out, err, stdin, began + timeout)
        finally:
            self._children.discard(call.pid)
        if isinstance(self.cgroup, EnclosingCgroup):  # orphans re-parented to mur (a subreaper) that exited
            tree.reap(self._waited_for())
        duration_ms = int((time.monotonic() - began) * 1000)
        after = self.cgroup.evidence() if self.cgroup else (0, 0)
        rc = call.returncode
        sig = -rc if rc is not None and rc < 0 else None
        exit_code = 128 + sig if sig is not None else (rc or 0)
        truncated = out.total > OUTPUT_LIMIT or err.total > OUTPUT_LIMIT
        self._captures = ()  # the log, counted as it is written, takes over from the spools
        # past workdir_max_bytes the session is over: no full log to add to what broke the limit
        full_path = self.shown(write_log(logs, text, out, err)) if truncated and self._exceeded is None else None
        out.close()
        err.close()
        self.ceiling.after_call()  # a session disk full now: E-RUN-013 before the model sees the next turn
        stderr = cut(bytes(err.head))
        if timed_out:
            stderr += f"\nmur: '{info.name}' timed out after {timeout:g}s and was killed\n"
        elif call.lost and self._exceeded is not None:  # the guard ended the session: say why, not how
            stderr += (f"\nmur: the workdir reached capabilities.resources.workdir_max_bytes while '{info.name}' "
                       "ran; every tool of the session was killed\n")
        elif call.lost:
            stderr += f"\nmur: the sandbox's spawner died while '{info.name}' ran; it was killed\n"
        return ShellResult(
            exit_code=exit_code, stdout=cut(bytes(out.head)), stderr=stderr, truncated=truncated,
            full_output_path=full_path, duration_ms=duration_ms, stdout_bytes=out.total, stderr_bytes=err.total,
            binary=info.canonical or info.name, command=text,
            resource_limit=attribute(sig, timed_out or call.lost, before, after, call.cpu_seconds,
                                     self.caps.resources.cpu_seconds),
            signal=sig, timed_out=timed_out,
        )

    # helpers ----------------------------------------------------------------------------------

    def _refused(self, info: Binary, text: str, code: int, message: str) -> ShellResult:
        return ShellResult(code, "", message, False, None, 0, 0, len(message.encode()),
                           info.canonical or info.name, text, None)

    def _waited_for(self) -> set[int]:
        """mur's children that tree.reap must leave to their own waiter: the spawner (a tool by its
        seccomp count, reaped by its Popen) and any running call's leader."""
        spawner = self._spawner.pid if self._spawner is not None else None
        return set(self._children) | ({spawner} if spawner is not None else set())

    def workdir_breach(self, error: MurError) -> None:
        """The ceiling was reached (Ceiling's guard): E-RUN-013 from now on, every tool stopped."""
        self._exceeded = error
        self.log(error.message)
        if self.cgroup is not None:
            self.cgroup.kill_all(timeout=2.0)  # stop the writer now; the session is terminated anyway
        for pgid in list(self._children):
            killpg(pgid)
        if self.on_workdir_exceeded is not None:
            self.on_workdir_exceeded(error)
