"""`mur supervise`: keep one deployment's `mur run` alive where there is no systemd.

Started by deploy (as root, or through `sudo -n` for a non-root deploy user), it:
  * is started detached by the shell (`setsid -f`, stdio to the log file; see plan.start_steps),
    or relaunches itself as a fresh detached process (`start_detached`);
  * owns a cgroup subtree for the service (``mur.sandbox.cgroups``: v1 controller roots on hybrid
    hosts, ``/sys/fs/cgroup/mur/<dep>`` on v2) and puts `mur run` in it, so stop kills the whole
    tree and the service has a memory/pids ceiling;
  * runs the service as the deploy user when started as root for a non-root user;
  * restarts it per the restart policy with exponential backoff (1 s doubling to 60 s, reset
    after 60 s of uptime), and never gives up (a crash loop is visible in `mur deploy status`);
  * writes `run/supervisor.pid` and `run/state.json`, and appends everything to `logs/service.log`;
  * on SIGTERM stops the service (SIGTERM, then SIGKILL after 10 s), kills whatever is left in its
    cgroup, removes the cgroup and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from mur.deploy.plan import read_env_file, run_argv
from mur.errors import MurError

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BACKOFF_START, BACKOFF_MAX, HEALTHY_AFTER = 1.0, 60.0, 60.0
STOP_GRACE = 10.0


def self_command() -> list[str]:
    """How to start this same mur again (the frozen bundle, or this interpreter)."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "mur"]


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


def read_state(run_dir: str) -> dict[str, Any]:
    """The supervisor's last state, with `alive` checked against the pid."""
    path = Path(run_dir) / "state.json"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"state": "absent", "alive": False}
    pid = state.get("supervisor_pid")
    state["alive"] = bool(pid) and _alive(int(pid))
    if not state["alive"] and state.get("state") not in ("stopped", "exited"):
        state["state"] = "dead"
    return state


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); look at its state.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def child_env(spec: dict[str, Any], release_dir: str, user: pwd.struct_passwd | None) -> dict[str, str]:
    """A clean environment: essentials, the release's env file, and the service settings."""
    home = spec.get("home") or (user.pw_dir if user else os.environ.get("HOME", "/"))
    env = {"PATH": DEFAULT_PATH, "HOME": home, "LANG": os.environ.get("LANG", "C.UTF-8")}
    if user:
        env["USER"] = env["LOGNAME"] = user.pw_name
    elif os.environ.get("USER"):
        env["USER"] = os.environ["USER"]
    if os.environ.get("TMPDIR"):
        env["TMPDIR"] = os.environ["TMPDIR"]
    with contextlib.suppress(OSError):
        env.update(read_env_file(Path(release_dir, "env").read_text()))
    env["MURMUR_A2A_TIMEOUT_SECS"] = "0"
    if os.environ.get("MUR_RUNTIME_DIR"):  # where the single-file runtime unpacked itself
        env["MUR_RUNTIME_DIR"] = os.environ["MUR_RUNTIME_DIR"]
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


class Supervisor:
    """The foreground loop (what runs detached, or as a container's main process)."""

    def __init__(self, spec: dict[str, Any], log: Callable[[str], None] | None = None):
        self.spec = spec
        self.run_dir = Path(spec["run_dir"])
        self.stopping = threading.Event()
        self.child: subprocess.Popen | None = None
        self.cgroup = None
        self.state: dict[str, Any] = {"deployment_id": spec["deployment_id"], "supervisor_pid": os.getpid(),
                                      "state": "starting", "restarts": 0, "url": None, "child_pid": None,
                                      "last_exit": None, "cgroup": None, "started_at": time.time()}
        self.log_fh = open(spec["log_file"], "ab", buffering=0) if not spec.get("log_to_stdout") else None
        self._log = log

    def log(self, text: str) -> None:
        line = f"[mur supervise {time.strftime('%Y-%m-%dT%H:%M:%S')}] {text}\n".encode()
        self._write(line)

    def _write(self, data: bytes) -> None:
        if self.log_fh is not None:
            self.log_fh.write(data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()

    def save(self, **fields: Any) -> None:
        self.state.update(fields)
        _write_json(self.run_dir / "state.json", self.state)

    def _make_cgroup(self) -> list[str]:
        try:
            from mur.sandbox.cgroups import CgroupLimits, CgroupUnavailable, create_session_cgroup
        except ImportError:
            self.log("no cgroup support in this runtime; running without a service cgroup")
            return []
        cg = self.spec.get("cgroup") or {}
        limits = CgroupLimits(int(cg.get("memory_bytes", 5 << 30)), int(cg.get("pids_max", 384)),
                              100 * (os.cpu_count() or 1), 1 << 40)
        try:
            self.cgroup = create_session_cgroup(str(cg.get("name") or self.spec["deployment_id"]), limits)
        except CgroupUnavailable as exc:
            self.log(f"service cgroup unavailable ({exc}); stop falls back to the process group")
            return []
        except OSError as exc:
            self.log(f"service cgroup unavailable ({exc}); stop falls back to the process group")
            return []
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

    def _pump(self, stream) -> None:
        first = True
        for line in iter(stream.readline, b""):
            if first and line.lstrip().startswith(b"{"):
                first = False
                with contextlib.suppress(ValueError):
                    startup = json.loads(line)
                    self.save(state="running", url=startup.get("url"), session_id=startup.get("session_id"))
            self._write(line)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        signal.signal(signal.SIGHUP, lambda *_: self._terminate_child())
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "supervisor.pid").write_text(f"{os.getpid()}\n")
        user = _service_user(self.spec)
        procs = self._make_cgroup()
        backoff = BACKOFF_START
        rc = 0
        try:
            while not self.stopping.is_set():
                release = os.path.realpath(self.spec["release_dir"])
                argv = run_argv(release, int(self.spec["port"]), self.spec.get("bind", "127.0.0.1"),
                                self.spec.get("run_args") or [])
                self.log(f"starting {' '.join(argv)}")
                started = time.monotonic()
                try:
                    self.child = subprocess.Popen(
                        argv, cwd=release, env=child_env(self.spec, release, user), stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                        preexec_fn=_preexec(procs, user))
                except OSError as exc:
                    self.log(f"cannot start the service: {exc}")
                    self.child, rc = None, 127
                if self.child is not None:
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
        with contextlib.suppress(OSError):
            (self.run_dir / "supervisor.pid").unlink()
        self.log("stopped")


def _remove_children(top: str) -> None:
    """Kill and remove every cgroup below `top`, deepest first."""
    for dirpath, dirnames, _files in os.walk(top, topdown=False):
        if dirpath == top:
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


def start_detached(spec_path: str, wait: float = 15.0) -> dict[str, Any]:
    """Launch the supervisor as a detached process unless one is alive; returns its state."""
    spec = load_spec(spec_path)
    run_dir = spec["run_dir"]
    state = read_state(run_dir)
    if state.get("alive"):
        return {**state, "already_running": True}
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    Path(spec["log_file"]).parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        (Path(run_dir) / "state.json").unlink()
    env = dict(os.environ)
    with open(spec["log_file"], "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(self_command() + ["supervise", "--foreground", "--spec", spec_path],
                                stdin=devnull, stdout=log, stderr=log, start_new_session=True, env=env,
                                cwd="/", close_fds=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        state = read_state(run_dir)
        if state.get("supervisor_pid") == proc.pid or state.get("alive"):
            return state
        if proc.poll() is not None:
            raise MurError("E-DEPLOY-004", f"the supervisor exited at once (status {proc.returncode})",
                           f"see {spec['log_file']}")
        time.sleep(0.1)
    raise MurError("E-DEPLOY-004", f"the supervisor did not report within {wait:.0f}s", f"see {spec['log_file']}")


def stop(run_dir: str, timeout: float = 30.0) -> dict[str, Any]:
    """SIGTERM the supervisor of `run_dir` and wait until it has cleaned up."""
    state = read_state(run_dir)
    pid = state.get("supervisor_pid")
    if not state.get("alive") or not pid or state.get("state") in ("stopped", "exited"):
        return {**state, "was_running": False}
    with contextlib.suppress(ProcessLookupError):
        os.kill(int(pid), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(int(pid)):
        time.sleep(0.1)
    if _alive(int(pid)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
        child = state.get("child_pid")
        if child:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(child), signal.SIGKILL)
    return {**read_state(run_dir), "was_running": True}


def smoke(spec: dict[str, Any], release_dir: str, port: int, timeout: float = 120.0) -> dict[str, Any]:
    """Start a release once on a spare port, wait for its startup JSON and agent card, stop it.

    Used before switching `current`, so a release that cannot start never replaces one that serves.
    """
    user = _service_user(spec)
    release = os.path.realpath(release_dir)
    smoke_dir = Path(release) / ".smoke"
    smoke_dir.mkdir(exist_ok=True)
    if user is not None:
        os.chown(smoke_dir, user.pw_uid, user.pw_gid)
    argv = run_argv(release, port, "127.0.0.1", spec.get("run_args") or [])
    argv[argv.index("--workdir") + 1] = str(smoke_dir)
    err_path = smoke_dir / "stderr.log"
    result: dict[str, Any] = {"ok": False, "argv": argv}
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, cwd=release, env=child_env(spec, release, user), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err, start_new_session=True,
                                preexec_fn=_preexec([], user))
    line = _read_line(proc, timeout)
    if not line:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)  # stdout closed: most likely it is exiting; report its status
    try:
        if not line:
            status = "still running" if proc.poll() is None else f"exited with status {proc.returncode}"
            result["error"] = f"capsule did not emit startup JSON within {timeout:.0f}s (mur process {status})"
        else:
            try:
                startup = json.loads(line)
                result["startup"] = startup
                url = str(startup["url"])
            except (ValueError, KeyError, TypeError):
                result["error"] = f"could not parse capsule startup JSON: {line[:300]!r}"
            else:
                card = agent_card(f"http://127.0.0.1:{url.rsplit(':', 1)[-1]}", wait=min(30.0, timeout))
                result.update(card)
                result["ok"] = bool(card.get("ok"))
    finally:
        terminate(proc)
        with contextlib.suppress(OSError):
            result["stderr"] = err_path.read_bytes()[-2000:].decode("utf-8", "replace")
        import shutil

        shutil.rmtree(smoke_dir, ignore_errors=True)
    return result


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    box: list[bytes] = []

    def reader() -> None:
        box.append(proc.stdout.readline())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    return box[0].decode("utf-8", "replace").strip() if box else ""


def agent_card(base_url: str, wait: float = 30.0) -> dict[str, Any]:
    """GET <base>/.well-known/agent-card.json, retrying until `wait` runs out."""
    import urllib.error
    import urllib.request

    url = base_url.rstrip("/") + "/.well-known/agent-card.json"
    deadline = time.monotonic() + wait
    last = ""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback URL built by us
                body = resp.read()
            return {"ok": True, "agent_card": json.loads(body)}
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = str(getattr(exc, "reason", exc))
        if time.monotonic() >= deadline:
            return {"ok": False, "error": f"no agent card at {url}: {last}"}
        time.sleep(0.5)
