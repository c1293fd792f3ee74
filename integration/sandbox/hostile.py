"""The hostile-model harness: a scripted loopback model drives a real `mur run`, one tool call per turn.

    capsule = HostileCapsule(tmp_path / "capsule")                 # driver + shell tools
    run = capsule.run(["ln -s /etc/shadow out/x", "cat out/x"])    # each string: one bash call
    assert run.results[1].exit_code != 0 and "root:" not in run.results[1].data

Pieces, all real:
  * the model is `python -m mur.testing.modelserver --script FILE --record FILE` (a subprocess on
    127.0.0.1): it answers each request with the next scripted tool call, then a final text reply;
  * the capsule is the murmur-driver-anthropic component (built by scripts/build-examples) with
    `capabilities.shell.allow` (bash, python3 and some coreutils by default);
  * `mur run --json` runs as a subprocess, as root or, with `user=`, as an unprivileged uid
    (`setpriv`, with a HOME it owns and a cgroup delegated to it, the way a deploy user runs);
  * results come back as the model saw them: the tool_result blocks of the recorded requests,
    matched to each call by tool_use id (`run.results[i]`), beside the session's trace.jsonl.

A call is a string (a bash script), a `Call(command, tool=...)`, or a dict `{"name", "input"}`.
The API (HostileCapsule, Call, CallResult, HostileRun, UnprivilegedUser) is meant to be reused by
other escape suites; keep it stable.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Union

import yaml

ROOT = Path(__file__).resolve().parents[2]
DRIVER_DIR = ROOT / "examples" / "murmur-driver-anthropic"
DRIVER_WASM = DRIVER_DIR / "murmur-driver-anthropic.wasm"
SYSTEM_PYTHON = "/usr/bin/python3"
HOST_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_SHELL = ("bash", "python3", "cat", "ls", "ln", "stat", "mkdir", "rm", "mv", "cp", "touch", "tr", "sort", "head",
                 "wc", "id", "readlink", "sleep", "chmod")
FINAL_TEXT = "hostile script finished"
_EXIT = re.compile(r"exit code (-?\d+)")


@dataclass(frozen=True)
class Call:
    """One tool call of the hostile model: a shell tool's `command`, or any tool with `input`."""

    command: str | None = None
    tool: str = "bash"
    input: dict[str, Any] | None = None

    def tool_input(self) -> dict[str, Any]:
        return dict(self.input) if self.input is not None else {"command": self.command or ""}


CallLike = Union[str, Call, dict]


def as_call(item: CallLike) -> Call:
    if isinstance(item, Call):
        return item
    if isinstance(item, str):
        return Call(item)
    return Call(tool=item["name"], input=dict(item.get("input") or {}))


@dataclass
class CallResult:
    """What the model got back for one call (None fields: the call never got an answer)."""

    call: Call
    content: str | None
    is_error: bool
    body: dict[str, Any] | None  # the tool-result JSON (status, summary, data, log_path, ...)

    @property
    def answered(self) -> bool:
        return self.content is not None

    @property
    def data(self) -> str:
        """stdout (+ "[stderr]" and stderr) of a shell call, else the raw content."""
        if self.body is not None and isinstance(self.body.get("data"), str):
            return self.body["data"]
        return self.content or ""

    @property
    def summary(self) -> str:
        return str(self.body.get("summary") or "") if self.body else (self.content or "")

    @property
    def exit_code(self) -> int | None:
        found = _EXIT.search(self.summary)
        return int(found.group(1)) if found else None

    @property
    def ok(self) -> bool:
        return self.answered and not self.is_error


@dataclass
class HostileRun:
    """One `mur run` driven by the hostile script."""

    returncode: int
    stdout: str
    stderr: str
    info: dict[str, Any]  # the --json startup line ({} when mur failed before it)
    session: Path | None  # the session directory (trace.jsonl, out/result.txt, logs/)
    accessible: Path | None  # the tools' workdir (their cwd: task.md, .capsule-home, their files)
    results: list[CallResult]
    requests: list[dict[str, Any]]  # every recorded /v1/messages request body, in order
    trace: list[dict[str, Any]] = field(default_factory=list)

    def events(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.trace if e.get("event_type") == event_type]

    @property
    def first_prompt(self) -> str:
        """The task text the model received in its first request."""
        if not self.requests:
            return ""
        first = self.requests[0].get("messages") or [{}]
        return _text(first[0].get("content"))

    @property
    def result_text(self) -> str | None:
        path = self.session / "out" / "result.txt" if self.session else None
        return path.read_text() if path is not None and path.is_file() else None

    def describe(self) -> str:
        """A failure message: exit status, stderr tail and every call's result."""
        lines = [f"mur run exited {self.returncode}", f"stderr: {self.stderr[-2000:]}"]
        for i, r in enumerate(self.results):
            lines.append(f"call {i} {r.call.tool_input()}: {r.content!r}")
        return "\n".join(lines)


@dataclass(frozen=True)
class UnprivilegedUser:
    """A uid/gid to run `mur run` as, with a HOME it owns (see `make_unprivileged_user`)."""

    uid: int
    gid: int
    home: Path
    mur: tuple[str, ...]  # argv prefix that runs this checkout's `mur` for this uid
    cgroups: tuple[str, ...] = ()  # v1 cgroup dirs delegated to the uid (the process starts in them)

    def chown(self, *paths: Path) -> None:
        for path in paths:
            for node in [path, *path.rglob("*")] if path.is_dir() else [path]:
                os.chown(node, self.uid, self.gid, follow_symlinks=False)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _tool_results(requests: list[dict[str, Any]]) -> dict[str, tuple[str, bool]]:
    found: dict[str, tuple[str, bool]] = {}
    for body in requests:
        for message in body.get("messages") or []:
            content = message.get("content")
            if message.get("role") != "user" or not isinstance(content, list):
                continue
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found[str(block.get("tool_use_id"))] = (_text(block.get("content")), bool(block.get("is_error")))
    return found


def python_stdlib() -> str:
    out = subprocess.run([SYSTEM_PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
                         capture_output=True, text=True)
    return out.stdout.strip() or sysconfig.get_paths()["stdlib"]


class HostileCapsule:
    """A capsule directory (driver + shell tools) that `run()` drives with a hostile script."""

    def __init__(self, root: Path, *, shell_allow: Iterable[str] = DEFAULT_SHELL, capabilities: str = "",
                 manifest_extra: str = "", user: UnprivilegedUser | None = None, max_turns: int | None = None,
                 artifacts: Iterable[tuple[str, Path]] = ()):
        if not DRIVER_WASM.is_file():
            raise FileNotFoundError(f"{DRIVER_WASM} is missing: run scripts/build-examples")
        self.root = Path(root)
        self.shell_allow = list(shell_allow)
        self.capabilities = capabilities
        self.manifest_extra = manifest_extra
        self.user = user
        self.max_turns = max_turns
        self.artifacts = list(artifacts)  # (name, local source dir) of extra WASM tools, e.g. tool_artifact()
        self.root.mkdir(parents=True, exist_ok=True)
        if user is not None:
            user.chown(self.root)
        self.manifest = self.root / "murmur.yaml"
        self._runs = 0

    # --- the pieces --------------------------------------------------------------------------

    def _write_manifest(self, port: int, turns: int) -> None:
        shell: dict[str, Any] = {"allow": self.shell_allow}
        if "python3" in self.shell_allow:
            shell["interpreter_runtime"] = [{"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]
        shell_yaml = yaml.safe_dump({"shell": shell}, sort_keys=False)
        caps = "".join("  " + line + "\n" for line in shell_yaml.splitlines())
        caps += "".join("  " + line + "\n" for line in self.capabilities.splitlines() if line.strip())
        extra_artifacts = "".join(f"  - name: {name}\n    runtime: tool\n    source: {src}\n    local_source: true\n"
                                  for name, src in self.artifacts)
        self.manifest.write_text(f"""name: hostile
version: "0.1.0"
artifacts:
  - name: murmur-driver-anthropic
    runtime: driver
    source: {DRIVER_DIR}
    local_source: true
{extra_artifacts}capabilities:
  network:
    allow: ["http://127.0.0.1:{port}"]
{caps}inference:
  transport: http
  endpoint: http://127.0.0.1:{port}
  model: claude-haiku-4-5
  api_key: sk-ant-hostile
  max_tokens: 1024
  max_turns: {turns}
  driver:
    artifact: murmur-driver-anthropic
{self.manifest_extra}""")
        if self.user is not None:
            self.user.chown(self.manifest)

    def _script(self, calls: list[Call], tag: str) -> list[dict[str, Any]]:
        replies: list[dict[str, Any]] = [
            {"tool_use": {"name": c.tool, "input": c.tool_input(), "id": f"toolu_{tag}_{i:03d}"}} for i, c in enumerate(calls)
        ]
        replies.append({"text": FINAL_TEXT})
        return replies

    def _mur(self) -> list[str]:
        return list(self.user.mur) if self.user is not None else [sys.executable, "-m", "mur"]

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = {
            "PATH": HOST_PATH, "LANG": "C.UTF-8", "MURMUR_A2A_TIMEOUT_SECS": "5",
            "HOME": str(self.user.home) if self.user is not None else os.environ.get("HOME", "/root"),
        }
        if self.user is not None:
            env["MUR_CACHE_DIR"] = str(self.user.home / ".murmur" / "cache")
            env["USER"] = f"u{self.user.uid}"
        else:
            env["MUR_CACHE_DIR"] = os.environ.get("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env.update(extra or {})
        return env

    def _start_model(self, script: list[dict[str, Any]], scratch: Path) -> tuple[subprocess.Popen, str, Path]:
        script_file = scratch / "script.yaml"
        record = scratch / "record.jsonl"
        script_file.write_text(yaml.safe_dump(script, sort_keys=False))
        proc = subprocess.Popen(
            [sys.executable, "-m", "mur.testing.modelserver", "--script", str(script_file), "--record", str(record)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )
        url = (proc.stdout.readline() if proc.stdout else "").strip()
        if not url.startswith("http://127.0.0.1:"):
            proc.kill()
            raise RuntimeError(f"model server did not start: {url!r} {proc.stderr.read() if proc.stderr else ''}")
        return proc, url, record

    @staticmethod
    def _stop_model(proc: subprocess.Popen, record: Path) -> list[dict[str, Any]]:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        requests = []
        if record.is_file():
            for line in record.read_text().splitlines():
                entry = json.loads(line)
                if entry.get("path") == "/v1/messages" and isinstance(entry.get("body"), dict):
                    requests.append(entry["body"])
        return requests

    # --- a run ---------------------------------------------------------------------------------

    def command(self, task: str | None, workdir: Path | None) -> list[str]:
        argv = [*self._mur(), "run", "--json", "--no-env-file", "-m", str(self.manifest)]
        if task is not None:
            argv += ["-t", task]
        if workdir is not None:
            argv += ["--workdir", str(workdir)]
        if self.user is not None:
            argv = ["setpriv", f"--reuid={self.user.uid}", f"--regid={self.user.gid}", "--clear-groups", "--", *argv]
        return argv

    def run(self, calls: Iterable[CallLike], *, task: str | None = "Run the scripted commands.",
            workdir: Path | None = None, env: dict[str, str] | None = None, timeout: float = 240) -> HostileRun:
        """Drive one `mur run` with `calls`; `task=None` lets mur read task.md / input.txt itself."""
        return self.start(calls, task=task, workdir=workdir, env=env).finish(timeout)

    def start(self, calls: Iterable[CallLike], *, task: str | None = "Run the scripted commands.",
              workdir: Path | None = None, env: dict[str, str] | None = None) -> "Running":
        """Like run(), but returns while `mur run` is still going (kill it, wait for its startup line...)."""
        calls = [as_call(c) for c in calls]
        self._runs += 1
        tag = f"{self._runs}{uuid.uuid4().hex[:6]}"
        scratch = self.root.parent / f".{self.root.name}-model-{tag}"
        scratch.mkdir(parents=True)
        model, url, record = self._start_model(self._script(calls, tag), scratch)
        try:
            self._write_manifest(int(url.rsplit(":", 1)[1]), self.max_turns or len(calls) + 2)
            proc = subprocess.Popen(self.command(task, workdir), cwd=self.root, env=self._env(env),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=self._join_cgroups if self.user else None)
        except BaseException:
            self._stop_model(model, record)
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        return Running(self, calls, tag, workdir, proc, model, record, scratch)

    def _join_cgroups(self) -> None:
        """preexec (still root): enter the cgroups delegated to the user, as a deploy's service does."""
        assert self.user is not None
        join_cgroups(self.user)


class Running:
    """A `mur run` started by HostileCapsule.start(); finish() collects it into a HostileRun."""

    def __init__(self, capsule: HostileCapsule, calls: list[Call], tag: str, workdir: Path | None,
                 proc: subprocess.Popen, model: subprocess.Popen, record: Path, scratch: Path):
        self.capsule, self.calls, self.tag, self.workdir = capsule, calls, tag, workdir
        self.proc, self._model, self._record, self._scratch = proc, model, record, scratch
        self._first = ""

    def startup(self) -> dict[str, Any]:
        """Wait for the --json startup line (the session is staged and its sandbox started)."""
        if not self._first and self.proc.stdout is not None:
            self._first = self.proc.stdout.readline()
        return _startup(self._first)

    def finish(self, timeout: float = 240) -> HostileRun:
        try:
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
        finally:
            requests = HostileCapsule._stop_model(self._model, self._record)
            shutil.rmtree(self._scratch, ignore_errors=True)
        stdout = self._first + (out or "")
        info = _startup(stdout)
        answers = _tool_results(requests)
        results = []
        for i, call in enumerate(self.calls):
            content, is_error = answers.get(f"toolu_{self.tag}_{i:03d}", (None, False))
            try:
                body = json.loads(content) if content else None
            except ValueError:
                body = None
            results.append(CallResult(call, content, is_error, body if isinstance(body, dict) else None))
        session = Path(info["workdir"]) if isinstance(info.get("workdir"), str) else None
        run = HostileRun(self.proc.returncode, stdout, err or "", info, session,
                         _accessible(session, self.workdir), results, requests)
        trace = session / "trace.jsonl" if session is not None else None
        if trace is not None and trace.is_file():
            run.trace = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
        return run


def tool_artifact(dest: Path, name: str, wasm: Path, description: str = "") -> Path:
    """A local-source WASM tool directory (murmur.yaml + the component) for ``artifacts=``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wasm, dest / f"{name}.wasm")
    (dest / "murmur.yaml").write_text(yaml.safe_dump({
        "name": name, "version": "0.1.0", "runtime": "tool", "description": description or f"test tool {name}",
        "requires_files": [f"{name}.wasm"]}, sort_keys=False))
    return dest


def join_cgroups(user: UnprivilegedUser) -> None:
    """Move the calling process into the user's cgroups (a preexec_fn, still root). On cgroup v2 a
    subtree an earlier mur enabled controllers in takes processes only in a leaf: mur's own
    ``murmur-supervisor``, where that mur moved itself (the "no internal processes" rule)."""
    for directory in user.cgroups:
        leaf = os.path.join(directory, "murmur-supervisor")
        target = leaf if os.path.isdir(leaf) else directory
        with open(os.path.join(target, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))


def _startup(stdout: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return {}
    return {}


def _accessible(session: Path | None, workdir: Path | None) -> Path | None:
    """The tools' workdir: --workdir DIR, else the session's work/ (the session dir itself in the
    layout before the runtime's record moved out of the tools' reach)."""
    if workdir is not None:
        return Path(workdir).resolve()
    if session is not None and (session / "work").is_dir():
        return session / "work"
    return session


# --- an unprivileged user ---------------------------------------------------------------------


def _reachable_by_others(path: str) -> bool:
    """Can a uid without any special grant execute `path` (every ancestor o+x, the file o+rx)?"""
    real = os.path.realpath(path)
    parts = Path(real).parents
    try:
        if any(not os.stat(p).st_mode & 0o001 for p in parts):
            return False
        return bool(os.stat(real).st_mode & 0o005 == 0o005)
    except OSError:
        return False


def python_for_others() -> tuple[str, ...] | None:
    """argv prefix that runs this checkout's mur for another uid: this interpreter when others can
    execute it, else the system python 3 of the same minor version with the venv's packages."""
    if _reachable_by_others(sys.executable) and _reachable_by_others(sysconfig.get_paths()["purelib"]):
        return (sys.executable, "-m", "mur")
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    if pythonpath and _reachable_by_others(sys.executable) and all(_reachable_by_others(p) for p in pythonpath):
        return (sys.executable, "-m", "mur")  # the packages come from PYTHONPATH (the VM suite's copy)
    if not os.path.exists(SYSTEM_PYTHON):
        return None
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "%d.%d" % sys.version_info[:2]:
        return None
    site = sysconfig.get_paths()["purelib"]
    if not _reachable_by_others(site):
        return None
    boot = (f"import site, sys; site.addsitedir({site!r}); sys.path.insert(0, {str(ROOT)!r}); "
            "sys.argv[0] = 'mur'; import runpy; runpy.run_module('mur', run_name='__main__', alter_sys=True)")
    return (SYSTEM_PYTHON, "-c", boot)


def cgroup_v1_roots() -> dict[str, str]:
    from mur.sandbox.cgroups import v1_controller_roots

    with open("/proc/self/mounts") as fh:
        return v1_controller_roots(fh.read())


V1_DELEGATED = ("memory", "pids", "cpu", "freezer", "blkio")
TEST_UID_BASE = 47000  # well below the 61184-65519 range systemd (and per-session uids) allocate from


def seed_cache(cache_root: Path, wasm: Iterable[Path] = (DRIVER_WASM,)) -> Path:
    """A fresh MUR_CACHE_DIR holding the compiled components of `wasm` (compiled once into this
    process's cache, then copied), so a run with its own cache does not compile the driver again."""
    from mur.fsutil import file_sha256

    target = Path(cache_root) / "wasm"
    target.mkdir(parents=True, exist_ok=True)
    wasm = [Path(w) for w in wasm if Path(w).is_file()]  # none in the kernel-matrix VMs (no examples there)
    if wasm:
        from mur.wasm.engine import WasmEngine

        engine = WasmEngine()
        try:
            for path in wasm:
                engine.component(path)
                source = engine.cache_path(file_sha256(path))
                if source.is_file():
                    shutil.copyfile(source, target / source.name)
        finally:
            engine.close()
    os.chmod(cache_root, 0o700)
    os.chmod(target, 0o700)
    return Path(cache_root)


def make_unprivileged_user() -> UnprivilegedUser | str:
    """A fresh uid (no passwd entry needed) with a HOME it owns under /tmp, the driver's compiled
    component in its cache, and, on a cgroup v1 host, memory/pids/cpu cgroups delegated to it.
    Returns a reason string when this host cannot provide one."""
    import tempfile

    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    mur = python_for_others()
    if mur is None:
        return "no python another uid can execute with this checkout's dependencies"
    uid = TEST_UID_BASE + os.getpid() % 1000
    home = Path(tempfile.mkdtemp(prefix="mur-hostile-home-", dir="/tmp"))
    cache = seed_cache(home / ".murmur" / "cache") / "wasm"
    user = UnprivilegedUser(uid, uid, home, mur)
    user.chown(home)
    os.chmod(home, 0o755)
    for d in (home / ".murmur", home / ".murmur" / "cache", cache):
        os.chmod(d, 0o700)
    groups: list[str] = []
    from mur.sandbox.cgroups import detect_mode

    with open("/proc/self/mounts") as fh:
        mode = detect_mode(fh.read())
    if mode == "unified":  # a cgroup v2 subtree delegated to the uid, the way systemd's Delegate=yes does
        path = os.path.join("/sys/fs/cgroup", f"mur-hostile-{uid}-{uuid.uuid4().hex[:8]}")
        os.mkdir(path)
        groups.append(path)
        for name in ("", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
            os.chown(os.path.join(path, name) if name else path, uid, uid)
    if mode in ("hybrid", "legacy"):
        roots = cgroup_v1_roots()
        for mountpoint in dict.fromkeys(roots[c] for c in V1_DELEGATED if c in roots):
            path = os.path.join(mountpoint, f"mur-hostile-{uid}-{uuid.uuid4().hex[:8]}")
            os.mkdir(path)
            groups.append(path)
            for name in ("", "cgroup.procs", "tasks"):
                os.chown(os.path.join(path, name) if name else path, uid, uid)
    return UnprivilegedUser(uid, uid, home, mur, tuple(groups))


def remove_cgroup(top: str) -> None:
    """SIGKILL every process in the cgroup `top` and below, then remove the directories (children first)."""
    import time

    for _ in range(100):
        if not os.path.exists(top):
            return
        for d in sorted((d for d, _s, _f in os.walk(top)), key=len, reverse=True):
            try:
                with open(os.path.join(d, "cgroup.procs")) as fh:
                    for pid in fh.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                os.rmdir(d)
            except OSError:
                pass
        time.sleep(0.05)


def remove_tree(path: Path) -> None:
    """rm -rf, iteratively (mur.fswalk): a test's tools may leave a tree deeper than shutil.rmtree recurses."""
    from mur.fsafe import Tree

    try:
        with Tree(Path(path).parent) as parent:
            parent.remove_tree(Path(path).name)
    except OSError:
        pass


def remove_unprivileged_user(user: UnprivilegedUser) -> None:
    """Kill what is left in the delegated cgroups, remove them and the HOME."""
    for top in user.cgroups:
        remove_cgroup(top)
    remove_tree(user.home)
