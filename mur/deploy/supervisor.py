"""`mur supervise run`: keep one deployment's `mur run` alive where there is no systemd.

Started by deploy (as root, or through `sudo -n` for a non-root deploy user; see
mur.deploy.init.supervisor for the shell commands that start and stop it), it:
  * owns a cgroup subtree for the service (``mur.sandbox.cgroups``: v1 controller roots on hybrid
    hosts, ``/sys/fs/cgroup/mur/<dep>`` on v2) and puts `mur run` in it, so stop kills the whole
    tree and the service has a memory/pids ceiling;
  * runs the service as the deploy user when started as root for a non-root user;
  * runs the release's prestart script before every start (stale payloads, bounded sessions);
  * restarts it per the restart policy with exponential backoff (1 s doubling to 60 s, reset
    after 60 s of uptime), and never gives up (a crash loop is visible in `mur deploy status`);
    always the release `current` named when it started (resolved once, recorded in state.json);
  * records `run/supervisor.pid` and `run/child.pid` with their identity (mur.deploy.procid),
    `run/cgroups` and `run/state.json`, and appends everything to `logs/service.log` (or stdout);
  * first removes what a previous supervisor killed with SIGKILL left behind (its service, still
    running, found by its identity-checked pid file and its cgroup);
  * on SIGTERM stops the service (SIGTERM, then SIGKILL after 10 s), kills whatever is left in its
    cgroup, removes the cgroup and exits.

`mur supervise smoke` starts a release once on a spare port (before it replaces a serving one).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable

from mur.deploy import procid
from mur.deploy.env import read_env_file
from mur.deploy.runline import run_argv
from mur.errors import MurError

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BACKOFF_START, BACKOFF_MAX, HEALTHY_AFTER = 1.0, 60.0, 60.0
STOP_GRACE = 10.0


def load_spec(path: str) -> dict[str, Any]:
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise MurError("E-DEPLOY-004", f"cannot read service spec {path}: {exc}") from exc
    for key in ("deployment_id", "release_dir", "port", "run_dir", "log_file"):
        if key not in spec:
            raise MurError("E-DEPLOY-004", f"service spec {path} lacks '{key}'")
    return spec


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, path)


def child_env(spec: dict[str, Any], release_dir: str, user: pwd.struct_passwd | None,
              overrides: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment: essentials, the release's env file, then the runtime's own variables."""
    home = spec.get("home") or (user.pw_dir if user else os.environ.get("HOME", "/"))
    env = {"PATH": DEFAULT_PATH, "HOME": home, "LANG": os.environ.get("LANG", "C.UTF-8"),
           # each service runs its capsule itself: a capsule host started by one deployment would live
           # in its cgroup and die with its stop, and destroy would leave it behind (the env file may
           # say MUR_CAPSULE_HOST=on: docs/run.md "The capsule host")
           "MUR_CAPSULE_HOST": "off"}
    if user:
        env["USER"] = env["LOGNAME"] = user.pw_name
    elif os.environ.get("USER"):
        env["USER"] = os.environ["USER"]
    with contextlib.suppress(OSError):
        env.update(read_env_file(Path(release_dir, "env").read_text()))
    env.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
    env.update(overrides or {})
    return env


def _service_user(spec: dict[str, Any]) -> pwd.struct_passwd | None:
    name = spec.get("user")
    if not name or os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(name)
    except KeyError as exc:
        raise MurError("E-DEPLOY-004", f"service user '{name}' does not exist on this host") from exc
    return None if pw.pw_uid == 0 else pw


def _preexec(procs_files: list[str], user: pwd.struct_passwd | None) -> Callable[[], None]:
    def run() -> None:
        pid = str(os.getpid())
        for f in procs_files:  # join the service cgroup while still root
            with contextlib.suppress(OSError):
                with open(f, "w") as fh:
                    fh.write(pid)
        if user is not None:
            os.setgroups(os.getgrouplist(user.pw_name, user.pw_gid))
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
    return run


def terminate(proc: subprocess.Popen) -> None:
    """Stop a `mur run` child: SIGTERM to it alone, then SIGKILL to its group after STOP_GRACE.

    SIGTERM to mur run alone lets a running task finish within its grace period, while a
    whole-group signal would also cut off the shell tools it is running.
    """
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _kill_recorded(pidfile: Path) -> None:
    """SIGKILL the process group of a recorded process, only if it is still that process."""
    pid = procid.recorded_pid(pidfile)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    procid.remove_pidfile(pidfile)


def _remove_children(top: str, include_top: bool = False) -> None:
    """Kill and remove every cgroup below `top` (and `top` itself), deepest first."""
    for dirpath, _dirnames, _files in os.walk(top, topdown=False):
        if dirpath == top and not include_top:
            continue
        for _ in range(50):
            try:
                pids = [int(x) for x in Path(dirpath, "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                pids = []
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                os.rmdir(dirpath)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


class Supervisor:
    """The foreground loop (what runs detached, or as a container's main process)."""

    def __init__(self, spec: dict[str, Any], out: BinaryIO | None = None):
        self.spec = spec
        self.dep_id = str(spec["deployment_id"])
        self.run_dir = Path(spec["run_dir"])
        self.stopping = threading.Event()
        self.child: subprocess.Popen | None = None
        self.cgroup = None
        self.state: dict[str, Any] = {"deployment_id": self.dep_id, "supervisor_pid": os.getpid(),
                                      "state": "starting", "restarts": 0, "url": None, "child_pid": None,
                                      "last_exit": None, "cgroup": None}
        self.out = out if out is not None else open(spec["log_file"], "ab", buffering=0)  # noqa: SIM115

    def log(self, text: str) -> None:
        self._write(f"[mur supervise {time.strftime('%Y-%m-%dT%H:%M:%S')}] {text}\n".encode())

    def _write(self, data: bytes) -> None:
        self.out.write(data)
        self.out.flush()

    def save(self, **fields: Any) -> None:
        self.state.update(fields)
        _write_json(self.run_dir / "state.json", self.state)

    def _reap_previous(self) -> None:
        """What a supervisor killed with SIGKILL left: its service (still serving the port) and cgroup."""
        _kill_recorded(self.run_dir / "child.pid")
        try:
            dirs = (self.run_dir / "cgroups").read_text().split()
        except OSError:
            dirs = []
        for d in dirs:
            if d.startswith("/sys/fs/cgroup/") and os.path.basename(d) == self.dep_id and os.path.isdir(d):
                _remove_children(d, include_top=True)

    def _make_cgroup(self) -> list[str]:
        from mur.sandbox.cgroups import CgroupLimits, CgroupUnavailable, create_session_cgroup

        cg = self.spec.get("cgroup") or {}
        limits = CgroupLimits(int(cg.get("memory_bytes", 5 << 30)), int(cg.get("pids_max", 384)),
                              100 * (os.cpu_count() or 1), 1 << 40)
        try:
            self.cgroup = create_session_cgroup(self.dep_id, limits)
        except (CgroupUnavailable, OSError) as exc:
            self.log(f"service cgroup unavailable ({exc}); stop falls back to the process group")
            return []
        (self.run_dir / "cgroups").write_text("\n".join(self.cgroup.dirs.values()) + "\n")
        self.save(cgroup=self.cgroup.dirs)
        self.log(f"service cgroup: {', '.join(self.cgroup.dirs.values())}")
        user = _service_user(self.spec)
        if user is not None and "unified" in self.cgroup.dirs:
            self._delegate(self.cgroup.dirs["unified"], user)
        return self.cgroup.procs_files

    def _delegate(self, path: str, user: pwd.struct_passwd) -> None:
        """cgroup v2 delegation to the service user (the kernel's documented model): own the
        directory and its procs/subtree files, so the runtime can create per-session children."""
        try:
            for name in ("", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
                os.chown(os.path.join(path, name) if name else path, user.pw_uid, user.pw_gid)
            self.log(f"delegated {path} to {user.pw_name}")
        except OSError as exc:
            self.log(f"could not delegate {path} to {user.pw_name}: {exc}")

    def _pump(self, stream) -> None:  # noqa: ANN001
        first = True
        for line in iter(stream.readline, b""):
            if first and line.lstrip().startswith(b"{"):
                first = False
                with contextlib.suppress(ValueError):
                    startup = json.loads(line)
                    self.save(state="running", url=startup.get("url"), session_id=startup.get("session_id"))
            self._write(line)

    def _prestart(self, release: str, env: dict[str, str], user: pwd.struct_passwd | None) -> None:
        script = Path(release, "prestart.sh")
        if not script.is_file():
            return
        res = subprocess.run(["/bin/sh", str(script)], cwd=release, env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, preexec_fn=_preexec([], user), timeout=120)
        if res.returncode != 0:
            self.log(f"prestart exited {res.returncode}: {(res.stderr or res.stdout).decode(errors='replace')[-300:]}")

    def _exclusive(self) -> bool:
        """One supervisor per deployment, whatever starts them: an flock on run/supervisor.lock held
        for this process's life (the kernel drops it with the process). A start whose link was cut
        before the supervisor wrote its pid file is invisible to the next stop, and a second start
        then found no pid file: two supervisors fought over one port. The later one now leaves at
        once, before it touches the pid file, the state or the first one's service."""
        import fcntl

        fd = os.open(self.run_dir / "supervisor.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self.log("another supervisor of this deployment runs (run/supervisor.lock): this one exits")
            return False
        self._lock_fd = fd  # kept open (not inherited: O_CLOEXEC) until the process ends
        return True

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        signal.signal(signal.SIGHUP, lambda *_: self._terminate_child())
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self._exclusive():
            return 0
        self._reap_previous()
        procid.write_pidfile(self.run_dir / "supervisor.pid", os.getpid())
        user = _service_user(self.spec)
        procs = self._make_cgroup()
        backoff = BACKOFF_START
        rc = 0
        # The release is resolved once: a restart after a crash runs the release that was serving,
        # never one `current` was switched to since (a switch restarts the supervisor).
        release = os.path.realpath(self.spec["release_dir"])
        self.save(release=release)
        try:
            while not self.stopping.is_set():
                env = child_env(self.spec, release, user)
                self._prestart(release, env, user)
                argv = run_argv(release, int(self.spec["port"]), self.spec.get("bind", "127.0.0.1"),
                                self.spec.get("run_args") or [])
                self.log(f"starting {' '.join(argv)}")
                started = time.monotonic()
                try:
                    self.child = subprocess.Popen(
                        argv, cwd=release, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_preexec(procs, user))
                except OSError as exc:
                    self.log(f"cannot start the service: {exc}")
                    self.child, rc = None, 127
                if self.child is not None:
                    procid.write_pidfile(self.run_dir / "child.pid", self.child.pid)
                    self.save(state="starting", child_pid=self.child.pid, url=None)
                    pump = threading.Thread(target=self._pump, args=(self.child.stdout,), daemon=True)
                    pump.start()
                    while self.child.poll() is None and not self.stopping.is_set():
                        self.stopping.wait(0.5)
                    if self.stopping.is_set():
                        break
                    pump.join(timeout=2)
                    rc = self.child.returncode
                    self.log(f"service exited with status {rc}")
                    self._sweep()
                if self.spec.get("restart", "on-failure") == "on-failure" and rc == 0:
                    self.save(state="exited", last_exit=rc, child_pid=None)
                    return 0
                backoff = BACKOFF_START if time.monotonic() - started > HEALTHY_AFTER else backoff
                self.save(state="backoff", last_exit=rc, child_pid=None, restarts=self.state["restarts"] + 1)
                self.log(f"restarting in {backoff:.0f}s")
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            return 0
        finally:
            self._shutdown()

    def _terminate_child(self) -> None:
        if self.child is not None:
            terminate(self.child)

    def _sweep(self) -> None:
        """Kill leftovers of the last run (its process group, its cgroup)."""
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, signal.SIGKILL)
        procid.remove_pidfile(self.run_dir / "child.pid")
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.kill_all()

    def _shutdown(self) -> None:
        self.log("stopping")
        self._terminate_child()
        self._sweep()
        if self.cgroup is not None:
            for top in self.cgroup.dirs.values():
                _remove_children(top)  # the runtime's own sub-cgroups (delegated v2 sessions)
            try:
                self.cgroup.remove()
            except OSError as exc:
                self.log(f"cgroup removal incomplete: {exc}")
        self.save(state="exited" if self.state["state"] == "exited" else "stopped", child_pid=None)
        for name in ("supervisor.pid", "cgroups"):
            procid.remove_pidfile(self.run_dir / name)
        self.log("stopped")


def run_command(args: list[str]) -> int | None:
    """`mur supervise run --spec FILE [--log-stdout]`, answered without typer (mur.cli.main): the
    supervisor stays up for its service's whole life, and through typer it held ~12 MB more.
    None for anything else (typer answers: help, usage errors)."""
    spec, log_stdout, rest = None, False, list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--log-stdout":
            log_stdout = True
        elif arg == "--spec" and rest and spec is None:
            spec = rest.pop(0)
        else:
            return None
    if spec is None:
        return None
    return Supervisor(load_spec(spec), sys.stdout.buffer if log_stdout else None).run()


def _read_token(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _tls_pin(cert: str | None) -> str | None:
    """The pin of the release's own certificate (the smoke check trusts exactly it)."""
    if not cert or not os.path.isfile(cert):
        return None
    import hashlib
    import ssl

    der = ssl.PEM_cert_to_DER_cert(Path(cert).read_text())
    return hashlib.sha256(der).hexdigest()


def spare_port(wanted: int) -> int:
    """`wanted` if nothing listens on it now, else one the kernel has free (deploy chose `wanted`
    from what listened when it looked; a leftover may have taken it since)."""
    import socket

    for port in (wanted, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    return wanted


def smoke(spec: dict[str, Any], release_dir: str, port: int, timeout: float = 120.0) -> dict[str, Any]:
    """Start a release on a spare port (another one when that is taken meanwhile); see `_smoke_once`.
    It records itself first (run/smoke-parent.pid), so an undo after a dropped connection stops it
    before it could start anything."""
    parent = Path(spec["run_dir"]) / "smoke-parent.pid"  # mur.deploy.init.supervisor.smoke_parent_pid
    procid.write_pidfile(parent, os.getpid())
    result: dict[str, Any] = {}
    try:
        for _attempt in range(3):
            result = _smoke_once(spec, release_dir, spare_port(port), timeout)
            if result.get("ok") or "E-RUN-010" not in (result.get("stderr") or ""):
                return result
            port = 0
        return result
    finally:
        procid.remove_pidfile(parent)


def _smoke_once(spec: dict[str, Any], release_dir: str, port: int, timeout: float = 120.0) -> dict[str, Any]:
    """Start a release once on a spare port, wait for its startup JSON and agent card, stop it.

    Used before switching `current`, so a release that cannot start never replaces one that serves.
    The candidate's pid is recorded (run/smoke.pid) so a stop or destroy after a dropped connection
    finds it; its workdir and TMPDIR live in the release and are removed afterwards.
    """
    user = _service_user(spec)
    release = os.path.realpath(release_dir)
    if not Path(release, "release.json").is_file():  # removed meanwhile (an undo): never recreate it
        return {"ok": False, "error": f"{release} is not a complete release"}
    smoke_dir = Path(release) / ".smoke"
    smoke_dir.mkdir(exist_ok=True)  # never its parents: a release removed under us stays removed
    (smoke_dir / "tmp").mkdir(exist_ok=True)
    if user is not None:
        for d in (smoke_dir, smoke_dir / "tmp"):
            os.chown(d, user.pw_uid, user.pw_gid)
    argv = run_argv(release, port, "127.0.0.1", spec.get("run_args") or [])
    argv[argv.index("--workdir") + 1] = str(smoke_dir)
    env = child_env(spec, release, user, {"TMPDIR": str(smoke_dir / "tmp")})
    err_path = smoke_dir / "stderr.log"
    result: dict[str, Any] = {"ok": False, "argv": argv}
    pidfile = Path(spec["run_dir"]) / "smoke.pid"  # mur.deploy.init.supervisor.smoke_pid
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, cwd=release, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True, preexec_fn=_preexec([], user))
    procid.write_pidfile(pidfile, proc.pid)
    try:
        line = _read_line(proc, timeout)
        if not line:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)  # stdout closed: most likely it is exiting; report its status
            status = "still running" if proc.poll() is None else f"exited with status {proc.returncode}"
            result["error"] = f"capsule did not emit startup JSON within {timeout:.0f}s (mur process {status})"
        else:
            try:
                result["startup"] = json.loads(line)
                url = str(result["startup"]["url"])
            except (ValueError, KeyError, TypeError):
                result["error"] = f"could not parse capsule startup JSON: {line[:300]!r}"
            else:
                from mur.deploy.health import wait_until_up  # the smoke start's alone: the supervisor never asks

                card = wait_until_up("127.0.0.1", int(url.rsplit(":", 1)[-1].split("/")[0]), min(30.0, timeout),
                                     token=_read_token(env.get("MURMUR_A2A_TOKEN_FILE")),
                                     pin=_tls_pin(env.get("MURMUR_A2A_TLS_CERT")))
                result.update(card)
    finally:
        terminate(proc)
        procid.remove_pidfile(pidfile)
        with contextlib.suppress(OSError):
            result["stderr"] = err_path.read_bytes()[-2000:].decode("utf-8", "replace")
        shutil.rmtree(smoke_dir, ignore_errors=True)
    return result


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    box: list[bytes] = []

    def reader() -> None:
        box.append(proc.stdout.readline())  # type: ignore[union-attr]

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    return box[0].decode("utf-8", "replace").strip() if box else ""
