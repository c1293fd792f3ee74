"""Shell tools: run a ``capabilities.shell.allow`` binary inside the kernel sandbox.

One ``ShellSandbox`` per session owns the session's cgroup(s), the Landlock ruleset, the compiled
seccomp filter, the workdir-size watcher and (as root) the workdir ACL grant for the sandbox uid.
``run`` serves both callers: the agent loop's ``{"command": "..."}`` form and the guest import
``murmur:shell/execute`` ``run(binary, args, env)`` form.

Runs are serialized: the cgroup's oom_kill / pids.max counters are read before and after each run,
and only a serialized run makes "this run hit that limit" a fact rather than a guess.
"""

from __future__ import annotations

import atexit
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Mapping

from mur import fsafe
from mur.errors import MurError
from mur.fsafe import Tree
from mur.sandbox import cgroups, elf, enclosing, namespaces, policy as pol, rlimits, tree, uids
from mur.sandbox.access import WorkdirAccess
from mur.sandbox.egress import EgressProxy, system_resolve
from mur.sandbox.enclosing import E012_HINT, EnclosingCgroup
from mur.sandbox.launch_warnings import launch_warnings
from mur.sandbox.output import OUTPUT_LIMIT, Capture, cut, write_log
from mur.sandbox.probe import HostProbe, probe_host
from mur.sandbox.result import ShellResult, attribute, limit_error, shell_trace_fields
from mur.sandbox.spawn import Prepared, SpawnError, prepare, spawn
from mur.sandbox.workdir_guard import WorkdirGuard
from mur.secrets import is_credential_name, matches_any


__all__ = [
    "OUTPUT_LIMIT", "ShellResult", "ShellSandbox", "attribute", "limit_error", "shell_env", "shell_trace_fields",
    "synthetic_tool_manifest", "write_synthetic_tool_manifests",
]

BASELINE_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TEMP", "TMP", "CARGO_HOME", "RUSTUP_HOME", "TERM")
CAPSULE_HOME = ".capsule-home"
DRAIN_SECONDS = 0.5  # after the tool exits, how long its leftovers may keep our pipes open
LIMIT_FIELDS = ("cpu_seconds", "max_file_size_bytes", "cgroup_memory_bytes", "cgroup_pids_max")


# --- environment and manifests ----------------------------------------------------------------


def shell_env(caps: Any, workdir: Path, host_env: Mapping[str, str]) -> dict[str, str]:
    """Upstream's rules: baseline names + baseline_env globs, minus strip_env globs and credentials,
    then HOME (and USERPROFILE) forced to ``<workdir>/.capsule-home``. strip_env and the
    credential backstop win over baseline_env."""
    shell = caps.shell
    keep = list(shell.baseline_env) if shell else []
    strip = list(shell.strip_env) if shell else []
    env = {
        k: v for k, v in host_env.items()
        if (k in BASELINE_ENV or matches_any(k, keep)) and not matches_any(k, strip) and not is_credential_name(k)
    }
    home = str(Path(workdir).absolute() / CAPSULE_HOME)
    env["HOME"] = home
    env["USERPROFILE"] = home
    return env


def synthetic_tool_manifest(binary: str) -> dict:
    """The tool manifest staged at ``tools/<bin>/murmur.yaml`` for one allowed binary (upstream section 7)."""
    if binary in pol.SHELLS:
        how = f"`command` is a script run as `{binary} -c <command>` in the session workdir."
    else:
        how = f"`command` is split like a shell would (no expansion) into the arguments of `{binary}`."
    return {
        "name": binary,
        "version": "0.0.0",
        "runtime": "tool",
        "implementation": "native",
        "description": f"Run the host binary `{binary}` (allowed by capabilities.shell.allow). {how} "
                       f"Output beyond {OUTPUT_LIMIT // 1024} KiB per stream is cut; the full log path is returned.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    }


def write_synthetic_tool_manifests(tools_dir: Path, allow: Iterable[str]) -> list[Path]:
    """Write ``<tools_dir>/<bin>/murmur.yaml`` for each binary (atomically, never through a link);
    returns the paths."""
    import yaml

    written = []
    with Tree(tools_dir, create=True) as tools:
        for binary in allow:
            tools.write_text(f"{binary}/murmur.yaml", yaml.safe_dump(synthetic_tool_manifest(binary), sort_keys=False))
            written.append(Path(tools_dir) / binary / "murmur.yaml")
    return written


@dataclass
class _Binary:
    name: str
    path: str | None  # what we exec (PATH lookup)
    canonical: str | None  # realpath, reported as `binary`
    closure: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()


# --- the sandbox ------------------------------------------------------------------------------


class ShellSandbox:
    """One per session. Owns the session's cgroup(s), uid lease, namespaces, egress proxy and the
    workdir-size watcher. ``caps`` is a ``mur.manifest.capsule.Capabilities``, ``network_allow``
    its parsed ``AllowEntry`` list (duck-typed: the sandbox package does not import the manifest's).

    ``resolve(host) -> [address, ...]`` is how network.allow hosts are looked up, at launch (a host
    that does not resolve is skipped, as the spec says) and by the egress proxy at connect time;
    tests inject one that maps test names to loopback.
    """

    def __init__(self, caps: Any, workdir: Path, session_id: str,
                 network_allow: list[Any], probe: HostProbe | None = None,
                 log: Callable[[str], None] | None = None, *,
                 host_env: Mapping[str, str] | None = None,
                 on_workdir_exceeded: Callable[[MurError], None] | None = None,
                 resolve: Callable[[str], list[str]] | None = None, logs_dir: Path | None = None) -> None:
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
        self.policy: pol.ShellPolicy | None = None
        self.cgroup: cgroups.SessionCgroup | EnclosingCgroup | None = None
        self.binaries: dict[str, _Binary] = {}
        self._prepared: Prepared | None = None
        self._access: WorkdirAccess | None = None
        self._guard: WorkdirGuard | None = None
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
        self._work: Tree | None = None  # the workdir, held open: every runtime access goes through it
        self._logs: Tree | None = None

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> list[tuple[str, str]]:
        """Create cgroups (E-RUN-012 if none on Linux), resolve binaries, start the size watcher;
        returns the launch warnings [(code, message)] (W-SEC-001/002/003/005/010)."""
        if self._started:
            raise MurError("E-RUN-015", "the shell sandbox was already started")
        self._started = True
        probe = self.probe = self.probe or probe_host()
        # An empty allow list still gets the cgroup (and E-RUN-012): the runtime also starts the
        # sandbox for spawn.allow / native-artifact capsules, which the spec bounds the same way.
        linux = probe.os == "linux"
        try:
            resources = self.caps.resources
            if linux:
                limits = cgroups.CgroupLimits(resources.cgroup_memory_bytes, resources.cgroup_pids_max,
                                              resources.cgroup_cpu_percent, resources.cgroup_io_bytes_per_sec)
                try:
                    self.cgroup = cgroups.create_session_cgroup(self.session_id, limits, workdir=str(self.workdir))
                except cgroups.CgroupUnavailable as exc:
                    self.cgroup = self._enclosing_cgroup(exc, limits)
                for note in self.cgroup.notes:
                    self.log(f"cgroup: {note}")
            try:
                self.workdir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise MurError("E-IO-003", f"cannot create the workdir {self.workdir}: {exc.strerror}") from exc
            self.workdir = Path(os.path.realpath(self.workdir))
            self._open_trees()
            self._resolve_binaries(with_closure=linux and probe.landlock_abi > 0)
            is_root = linux and os.geteuid() == 0
            run_as = self._lease_uid() if is_root else None
            network, joined = self._isolate(probe, is_root)
            for host in network.tcp.skipped:
                self.log(f"network.allow host '{host}' did not resolve at launch: it contributes nothing")
            self.policy = pol.build_policy(
                self.caps, str(self.workdir), probe,
                closures={b.name: b.closure for b in self.binaries.values() if b.closure},
                network=network, run_as=run_as, namespaces=joined, readonly=self._readonly(),
                # a fresh session uid, or a user namespace of our own, starts from no tasks at all
                nproc_baseline=0 if run_as or "user" in joined else rlimits.uid_task_count(os.getuid()),
                hard_limits=rlimits.inherited_hard_limits(), existing=os.path.exists, aggregate=self._aggregate(),
            )
            self.log(f"shell sandbox: network {network.mechanism}, processes {self.policy.processes}, "
                     f"namespaces {'+'.join(joined) or 'none'}")
            if run_as is not None:
                self._access = WorkdirAccess(str(self.workdir), *run_as, readonly=self._readonly())
                try:
                    self._access.grant()
                except OSError as exc:
                    raise MurError("E-RUN-015", f"cannot give the session uid {run_as[0]} access to the "
                                   f"workdir {self.workdir}: {exc}") from exc
                for note in self._access.notes:
                    self.log(f"workdir access: {note}")
            try:
                self._prepared = prepare(self.policy, self.cgroup, self.namespaces)
            except OSError as exc:
                raise MurError("E-RUN-015", f"the shell sandbox could not be prepared: {exc}") from exc
            if network.proxy and self.namespaces is not None and self.namespaces.listener is not None:
                self.proxy = EgressProxy(self.namespaces.listener, network.allow, resolve=self.resolve, log=self.log)
                self.proxy.start()
            self._guard = WorkdirGuard(str(self.workdir), resources.workdir_max_bytes, self._workdir_breach,
                                       also=self._readonly(),  # shell logs grow with what tools print
                                       pending=lambda: sum(c.spooled for c in self._captures))
            self._guard.start()
            atexit.register(self.close)
        except BaseException:
            self.close()
            raise
        return launch_warnings(self.caps, self.probe, self.policy)

    def close(self) -> None:
        """Kill every process in the cgroup(s), remove them, undo the ACL grant; idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        if self._guard is not None:
            self._guard.stop()
        for pgid in list(self._children):
            _killpg(pgid)
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
            self.namespaces.close()
        if self._access is not None:
            try:
                self._access.revoke()
            except OSError as exc:
                self.log(f"workdir access cleanup failed: {exc}")
        if self._lease is not None:
            self._lease.release()
        for tree in (self._work, self._logs):
            if tree is not None:
                tree.close()

    def _open_trees(self) -> None:
        try:
            self._work = Tree(self.workdir)
            if self.logs_dir is None or fsafe.inside(self.logs_dir, self.workdir):
                self._logs = self._work.subtree(os.path.relpath(self.logs_dir or self.workdir / "logs", self.workdir),
                                                create=True)
            else:
                self._logs = Tree(self.logs_dir, create=True)
            self.logs_dir = self._logs.path
        except OSError as exc:
            raise MurError("E-IO-003", f"cannot open the workdir {self.workdir} or its logs: {exc}") from exc

    def _readonly(self) -> tuple[str, ...]:
        """The logs directory, when it is outside the workdir: tools may read it, never write it."""
        logs = str(self.logs_dir)
        return () if self.logs_dir is None or fsafe.inside(logs, self.workdir) else (logs,)

    def __enter__(self) -> "ShellSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def workdir_exceeded(self) -> MurError | None:
        """E-RUN-013 once the watcher saw the workdir past workdir_max_bytes."""
        return self._exceeded

    # running ----------------------------------------------------------------------------------

    def run(self, binary: str, command: str | None = None, args: list[str] | None = None,
            env: Iterable[tuple[str, str]] = (), timeout: float | None = None,
            stdin: bytes | None = None) -> ShellResult:
        """Run an allowed binary: ``command`` (agent-loop form) or ``args`` (guest import form)."""
        if binary not in self.caps.shell_allow:
            raise MurError("E-RUN-015", f"shell binary '{binary}' is not in capabilities.shell.allow",
                           "add it to capabilities.shell.allow in murmur.yaml")
        if not self._started or self._closed or self._prepared is None:
            raise MurError("E-RUN-015", "the shell sandbox is not running (start() not called, or closed)")
        if self._exceeded is not None:
            raise self._exceeded
        info = self.binaries[binary]
        argv, text = self._argv(info, command, args)
        if info.path is None:
            return self._refused(info, text, 127, f"mur: {binary}: not found on PATH\n")
        extra = dict(env)
        run_env = shell_env(self.caps, self.workdir, self.host_env)
        assert self.policy is not None
        for name in pol.NO_PROXY_NAMES:
            run_env.pop(name, None)
        run_env.update(pol.proxy_env(self.policy.network))
        run_env.update({k: v for k, v in extra.items() if k not in ("HOME", "USERPROFILE")})
        strip = list(self.caps.shell.strip_env) if self.caps.shell else []
        for name in [k for k in run_env if k in extra and (is_credential_name(k) or matches_any(k, strip))]:
            del run_env[name]
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

    def _run_locked(self, info: _Binary, argv: list[str], text: str, env: dict[str, str], timeout: float,
                    stdin: bytes | None) -> ShellResult:
        before = self.cgroup.evidence() if self.cgroup else (0, 0)
        logs = self._logs
        assert logs is not None
        cap = self.caps.resources.workdir_max_bytes
        out, err = Capture(logs, cap), Capture(logs, cap)
        self._captures = (out, err)
        began = time.monotonic()
        try:
            proc = spawn(argv, executable=info.path, env=env, cwd=str(self.workdir), prepared=self._prepared,
                         stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
        except SpawnError as exc:
            raise MurError("E-RUN-015", f"the shell sandbox could not be applied to '{info.name}': {exc}") from exc
        except OSError as exc:
            return self._refused(info, text, 126, f"mur: cannot execute {info.path}: {exc.strerror}\n")
        self._children.add(proc.pid)
        try:
            timed_out = self._pump(proc, out, err, stdin, began + timeout)
        finally:
            self._children.discard(proc.pid)
        if isinstance(self.cgroup, EnclosingCgroup):  # orphans re-parented to mur (a subreaper) that exited
            tree.reap(self._children)
        duration_ms = int((time.monotonic() - began) * 1000)
        after = self.cgroup.evidence() if self.cgroup else (0, 0)
        rc = proc.returncode
        sig = -rc if rc is not None and rc < 0 else None
        exit_code = 128 + sig if sig is not None else (rc or 0)
        truncated = out.total > OUTPUT_LIMIT or err.total > OUTPUT_LIMIT
        self._captures = ()  # the log, counted as it is written, takes over from the spools
        # past workdir_max_bytes the session is over: no full log to add to what broke the limit
        full_path = write_log(logs, text, out, err) if truncated and self._exceeded is None else None
        out.close()
        err.close()
        stderr = cut(bytes(err.head))
        if timed_out:
            stderr += f"\nmur: '{info.name}' timed out after {timeout:g}s and was killed\n"
        return ShellResult(
            exit_code=exit_code, stdout=cut(bytes(out.head)), stderr=stderr, truncated=truncated,
            full_output_path=full_path, duration_ms=duration_ms, stdout_bytes=out.total, stderr_bytes=err.total,
            binary=info.canonical or info.name, command=text,
            resource_limit=attribute(sig, timed_out, before, after, getattr(proc, "mur_cpu_seconds", 0.0),
                                     self.caps.resources.cpu_seconds),
            signal=sig, timed_out=timed_out,
        )

    def _pump(self, proc: subprocess.Popen, out: Capture, err: Capture, stdin: bytes | None,
              deadline: float) -> bool:
        """Read both pipes until the tool exits (or the deadline), then drain; returns timed_out.

        The child's exit wakes the selector through a pidfd (Linux 5.3+), so a call costs no
        polling latency; without pidfds we poll with a short, growing interval.
        """
        if stdin is not None and proc.stdin is not None:
            threading.Thread(target=_feed_stdin, args=(proc.stdin, stdin), daemon=True).start()
        sel = selectors.DefaultSelector()
        pipes = 0
        for pipe, capture in ((proc.stdout, out), (proc.stderr, err)):
            if pipe is not None:
                os.set_blocking(pipe.fileno(), False)
                sel.register(pipe, selectors.EVENT_READ, capture)
                pipes += 1
        pidfd = _pidfd(proc.pid)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ, None)
        timed_out = exited = False
        drain_until = 0.0
        poll = 0.001
        try:
            while True:
                now = time.monotonic()
                if not exited and _reap(proc, block=False):
                    exited = True
                    _killpg(proc.pid)  # the call is over: its background jobs go with it
                    drain_until = now + DRAIN_SECONDS
                if exited and (pipes == 0 or now >= drain_until):
                    break  # past the drain, something that left our process group still holds a pipe
                if not exited and not timed_out and now >= deadline:
                    timed_out = True
                    _killpg(proc.pid)
                if exited:
                    wait = drain_until - now
                elif pidfd is not None:
                    wait = max(0.0, deadline - now) if not timed_out else 0.05
                else:
                    wait, poll = min(poll, max(0.0, deadline - now)), min(poll * 2, 0.05)
                for key, _ in sel.select(timeout=wait):
                    if key.data is None:  # the pidfd: the child exited, reaped at the loop top
                        sel.unregister(key.fileobj)
                        continue
                    try:
                        chunk = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    if chunk:
                        key.data.feed(chunk)
                    else:
                        sel.unregister(key.fileobj)
                        pipes -= 1
        finally:
            sel.close()
            if pidfd is not None:
                os.close(pidfd)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        return timed_out

    # helpers ----------------------------------------------------------------------------------

    def _argv(self, info: _Binary, command: str | None, args: list[str] | None) -> tuple[list[str], str]:
        name = info.name
        if command is not None and name in pol.SHELLS:
            return [name, "-c", command] + list(args or []), command
        if command is not None:
            try:
                words = shlex.split(command)
            except ValueError as exc:
                raise MurError("E-RUN-015", f"cannot split the command for '{name}': {exc}") from exc
            if words and words[0] in (name, info.path, info.canonical):
                words = words[1:]  # the model wrote the binary name itself: do not pass it twice
            argv = [name] + words + list(args or [])
        else:
            argv = [name] + list(args or [])
        return argv, shlex.join(argv)

    def _refused(self, info: _Binary, text: str, code: int, message: str) -> ShellResult:
        return ShellResult(code, "", message, False, None, 0, 0, len(message.encode()),
                           info.canonical or info.name, text, None)

    def _lookup_path(self) -> str:
        """The host PATH without entries a tool could have filled: relative ones (mur's cwd) and
        ones inside the tools' workdir (a previous session's tools could plant a `bash` there, which
        would then be granted execute and run as the allowed binary)."""
        kept = []
        for entry in self.host_env.get("PATH", os.defpath).split(os.pathsep):
            if not os.path.isabs(entry) or fsafe.inside(os.path.realpath(entry), self.workdir):
                self.log(f"PATH entry {entry!r} is not used to find shell binaries: "
                         + ("relative" if not os.path.isabs(entry) else "inside the tools' workdir"))
                continue
            kept.append(entry)
        return os.pathsep.join(kept)

    def _resolve_binaries(self, with_closure: bool) -> None:
        path_env = self._lookup_path()
        for name in self.caps.shell_allow:
            found = shutil.which(name, path=path_env)
            if found is not None and fsafe.inside(os.path.realpath(found), self.workdir):
                self.log(f"shell binary '{name}' resolves into the tools' workdir ({found}): not used")
                found = None
            if found is None:
                self.log(f"shell binary '{name}' was not found on PATH: calls to it will fail")
                self.binaries[name] = _Binary(name, None, None)
                continue
            found = os.path.abspath(found)
            info = _Binary(name, found, os.path.realpath(found))
            if with_closure:
                closure = elf.closure(found, path_env=path_env)
                files = [f for f in closure.files if not fsafe.inside(os.path.realpath(f), self.workdir)]
                if len(files) < len(closure.files):  # a library (RUNPATH, $ORIGIN) in the tools' reach
                    self.log(f"shell binary '{name}': files inside the tools' workdir are never granted execute: "
                             + ", ".join(f for f in closure.files if f not in files))
                missing = list(closure.missing)
                for grant in self.caps.shell.interpreter_runtime if self.caps.shell else ():
                    if grant.binary != name:
                        continue
                    for d in grant.dirs:
                        if os.path.isdir(d.path):
                            ext = elf.extension_closure(d.path, path_env=path_env)
                            files += [f for f in ext.files if f not in files]
                info.closure, info.missing = tuple(files), tuple(dict.fromkeys(missing))
                if closure.missing:
                    self.log(f"shell binary '{name}': libraries not found for the Landlock grant: "
                             + ", ".join(closure.missing))
            self.binaries[name] = info

    def _enclosing_cgroup(self, exc: cgroups.CgroupUnavailable, limits: cgroups.CgroupLimits) -> EnclosingCgroup:
        """No cgroup of the session's own: the cgroup mur runs in is the aggregate bound when it has a
        memory limit (and a pids.max, if any) at or below the manifest's that mur cannot change;
        E-RUN-012 otherwise."""
        bound = enclosing.find_enclosing()
        why = enclosing.unmet(bound, limits.memory_bytes, limits.pids_max)
        if why is not None:
            raise MurError(
                "E-RUN-012",
                f"no cgroup could be created to bound the shell subprocess tree ({exc}), {why}; a capsule with "
                "capabilities.shell.allow does not run without an aggregate memory/pids bound", E012_HINT,
            ) from exc
        assert bound is not None
        tree.become_subreaper()  # a tool's orphans come back to mur, where kill_tools finds them
        self.log(f"cgroup: no cgroup of the session's own ({exc}); the aggregate bound is the cgroup mur runs in, "
                 f"which no process in it can leave or raise ({bound.describe()}), shared with the runtime")
        return EnclosingCgroup(bound, find=lambda: {p for p, st in tree.tool_processes().items() if st != "Z"},
                               kill=lambda timeout: tree.kill_tools(timeout, exclude=self._children))

    def _aggregate(self) -> str:
        if not isinstance(self.cgroup, EnclosingCgroup):
            return "session-cgroup"
        return "enclosing-cgroup" if self.cgroup.bound.pids_max is not None else "enclosing-cgroup+nproc"

    def _lease_uid(self) -> tuple[int, int]:
        try:
            self._lease = uids.lease(self.session_id)
        except uids.UidUnavailable as exc:
            raise MurError("E-RUN-015", f"no sandbox uid could be leased for this session: {exc}",
                           "mur keeps its uid leases in /run/mur/uids; it must be a root-owned directory") from exc
        return self._lease.uid, self._lease.gid

    def _isolate(self, probe: HostProbe, is_root: bool) -> tuple[pol.NetworkPlan, tuple[str, ...]]:
        """Create the session's namespaces (and the proxy listener in them); returns the network plan
        and the namespaces the tools will join. Refuses (E-CAP-005) rather than fall back to port
        rules when the probe promised a network namespace and it cannot be made now."""
        linux = probe.os == "linux"
        names = pol.plan_namespaces(is_root=is_root, private_net=linux and probe.netns, userns=probe.userns,
                                    workdir_exec=self.caps.filesystem.workdir_exec) if linux else ()
        resolves = lambda host: bool(self.resolve(host)) if linux else False  # noqa: E731
        network = pol.plan_network(self.network_allow, resolves, private_net=bool(names),
                                   landlock_abi=probe.landlock_abi if linux else 0)
        if not names:
            return network, ()
        port = pol.PROXY_PORT if network.proxy else None
        try:
            try:
                self.namespaces = namespaces.create(names, workdir=str(self.workdir), proxy_port=port)
            except OSError as exc:
                if "mnt" not in names:
                    raise
                # e.g. a workdir on a filesystem that refuses a bind mount here: keep the rest
                names = tuple(n for n in names if n != "mnt")
                self.namespaces = namespaces.create(names, workdir=str(self.workdir), proxy_port=port)
                self.log(f"the workdir could not be re-mounted noexec ({exc}): the ELF loader could still map "
                         "a binary copied into the workdir")
        except OSError as exc:
            if network.proxy:
                raise MurError("E-CAP-005", f"cannot create the network namespace that carries network.allow for "
                               f"shell tools: {exc}", "run mur as root, or allow unprivileged user namespaces "
                               "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces)") from exc
            self.log(f"the session namespaces could not be created ({exc}): tools run without them")
            return pol.plan_network(self.network_allow, resolves, private_net=False,
                                    landlock_abi=probe.landlock_abi), ()
        return network, names

    def _workdir_breach(self, size: int) -> None:
        limit = self.caps.resources.workdir_max_bytes
        self._exceeded = MurError(
            "E-RUN-013",
            f"the session workdir grew to {size} bytes, past capabilities.resources.workdir_max_bytes ({limit})",
            "raise capabilities.resources.workdir_max_bytes, or have the capsule clean up after itself",
        )
        self.log(self._exceeded.message)
        if self.cgroup is not None:
            self.cgroup.kill_all(timeout=2.0)  # stop the writer now; the session is terminated anyway
        for pgid in list(self._children):
            _killpg(pgid)
        if self.on_workdir_exceeded is not None:
            self.on_workdir_exceeded(self._exceeded)


def _feed_stdin(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _reap(proc: subprocess.Popen, block: bool) -> bool:
    """waitpid through wait4, keeping the child's rusage (CPU-time evidence for RLIMIT_CPU)."""
    if proc.returncode is not None:
        return True
    try:
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        proc.returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        return True
    if pid == 0:
        return False
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.mur_cpu_seconds = usage.ru_utime + usage.ru_stime  # type: ignore[attr-defined]
    return True


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, or a kernel older than 5.3
        return None


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

