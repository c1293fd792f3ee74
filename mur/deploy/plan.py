"""Deploy plans as data: what to create, upload, write and run on a target, and in which phase.

Everything here is pure (inputs -> frozen dataclasses), so tests assert plans as data and the
executor (``mur.deploy.apply``) is the only place that touches a machine. Remote layout, all under
the target user's own home (never a hard-coded /root)::

    ~/.murmur/bin/mur-<version>-<platform>            pinned runtime, shared by deployments
    ~/.murmur/bin/.refs/<bundle>/<dep_id>             who uses it (destroy removes unused ones)
    ~/.murmur/artifacts/<name>/<version>/...          the target's global artifact store
    ~/.murmur/deployments/<dep_id>/releases/<n>/      murmur.yaml, referenced files, workdir/,
                                                      env (0600), mur -> the bundle, service.json,
                                                      the systemd unit text, release.json
    ~/.murmur/deployments/<dep_id>/current            symlink to the serving release
    ~/.murmur/deployments/<dep_id>/run/ logs/         supervisor pid/state, service log
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Union

from mur.errors import MurError

KEEP_RELEASES = 5
PORT_RANGE = (20000, 40000)
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --- steps ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mkdir:
    path: str
    mode: int = 0o755


@dataclass(frozen=True)
class Upload:
    """Copy a local file to `dst` atomically; skipped when the remote sha256 already matches."""

    src: str
    dst: str
    mode: int
    sha256: str
    size: int = 0
    refs: str | None = None  # a .refs dir recording that this deployment uses the file
    alt: str | None = None  # the same file in the previous release: linked there instead of uploaded


@dataclass(frozen=True)
class WriteFile:
    """Write `content` to `dst` atomically with `mode`; skipped when unchanged."""

    dst: str
    content: bytes
    mode: int = 0o644

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


@dataclass(frozen=True)
class Symlink:
    """Point `link` at `target`, atomically (rename over the old link)."""

    target: str
    link: str


@dataclass(frozen=True)
class Run:
    cmd: str
    sudo: bool = False
    check: bool = True
    label: str = ""
    timeout: float | None = None


Step = Union[Mkdir, Upload, WriteFile, Symlink, Run]


# --- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileRef:
    """A local file and where it goes, relative to its destination root."""

    src: str
    rel: str
    sha256: str
    size: int = 0
    mode: int = 0o644


@dataclass(frozen=True)
class ArtifactRef:
    name: str
    version: str
    files: tuple[FileRef, ...]  # zip (+ .sha256, .meta.json), rel = file name
    zip_name: str
    sha256: str


@dataclass(frozen=True)
class BundleRef:
    name: str  # mur-<version>-<platform>
    src: str
    sha256: str
    version: str
    size: int = 0


@dataclass(frozen=True)
class Layout:
    """Where things live on one target for one deployment."""

    home: str
    dep_id: str

    @property
    def murmur(self) -> str:
        return f"{self.home.rstrip('/')}/.murmur"

    @property
    def bin_dir(self) -> str:
        return f"{self.murmur}/bin"

    def bundle(self, name: str) -> str:
        return f"{self.bin_dir}/{name}"

    def bundle_refs(self, name: str) -> str:
        return f"{self.bin_dir}/.refs/{name}"

    @property
    def runtime_dir(self) -> str:
        """Where the single-file runtime unpacks itself (the same for root and the deploy user)."""
        return f"{self.murmur}/runtime"

    @property
    def artifacts(self) -> str:
        return f"{self.murmur}/artifacts"

    def artifact_dir(self, name: str, version: str) -> str:
        return f"{self.artifacts}/{name}/{version}"

    @property
    def wasm_cache(self) -> str:
        """The runtime's compile cache (mur.wasm.engine): must be 0700 and owned by the service user."""
        return f"{self.murmur}/cache/wasm"

    @property
    def root(self) -> str:
        return f"{self.murmur}/deployments/{self.dep_id}"

    @property
    def releases(self) -> str:
        return f"{self.root}/releases"

    def release(self, n: int) -> str:
        return f"{self.releases}/{n}"

    @property
    def current(self) -> str:
        return f"{self.root}/current"

    @property
    def run_dir(self) -> str:
        return f"{self.root}/run"

    @property
    def log_dir(self) -> str:
        return f"{self.root}/logs"

    @property
    def log_file(self) -> str:
        return f"{self.log_dir}/service.log"

    @property
    def unit_name(self) -> str:
        return f"mur-{self.dep_id}.service"

    @property
    def unit_path(self) -> str:
        return f"/etc/systemd/system/{self.unit_name}"


@dataclass(frozen=True)
class ServiceConfig:
    """How the capsule runs as a service (the 'config' half of a release)."""

    port: int
    bind: str = "127.0.0.1"
    restart: str = "on-failure"  # "on-failure" | "always"
    init: str = "supervisor"  # "systemd" | "supervisor"
    user: str | None = None  # run the service as this user (None: the deploy user itself)
    memory_bytes: int = 5 << 30
    tasks_max: int = 384
    env: tuple[tuple[str, str], ...] = ()
    run_args: tuple[str, ...] = ()  # extra `mur run` flags (the lifecycle override of a service)


@dataclass(frozen=True)
class ReleaseInputs:
    dep_id: str
    home: str
    n: int
    bundle: BundleRef
    manifest: FileRef
    files: tuple[FileRef, ...] = ()
    workdir: tuple[FileRef, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()
    service: ServiceConfig = field(default_factory=lambda: ServiceConfig(port=0))
    sudo: bool = False  # the deploy user is not root: privileged steps go through `sudo -n`
    prev_n: int | None = None  # the serving release, whose unchanged files are linked, not uploaded
    precompiled: tuple[FileRef, ...] = ()  # compiled components for the target's engine cache
    capsule_name: str = ""
    capsule_version: str = ""


@dataclass(frozen=True)
class ReleasePlan:
    layout: Layout
    release_dir: str
    digest: str
    capsule_digest: str
    config_digest: str
    prepare: tuple[Step, ...]
    verify_runtime: Run
    activate: tuple[Step, ...]
    service_spec: dict[str, Any]
    release_meta: dict[str, Any]


# --- env --------------------------------------------------------------------------------------


def parse_env_args(entries: list[str]) -> dict[str, str]:
    """`--env KEY=VALUE` entries (split on the first `=`, empty value allowed)."""
    out: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise MurError("E-DEPLOY-001", f'--env value "{entry}" must be KEY=VALUE')
        _check_env(key, value, "--env")
        out[key] = value
    return out


def parse_env_text(text: str, origin: str) -> dict[str, str]:
    """A .env file: KEY=VALUE lines; blank and # lines skipped; `export ` stripped; quotes removed."""
    out: dict[str, str] = {}
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise MurError("E-DEPLOY-001", f"{origin}:{i}: expected KEY=VALUE, got {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        _check_env(key, value, f"{origin}:{i}")
        out[key] = value
    return out


def _check_env(key: str, value: str, where: str) -> None:
    if not ENV_KEY.match(key):
        raise MurError("E-DEPLOY-001", f"{where}: '{key}' is not a valid environment variable name")
    if "\n" in value or "\r" in value or "\0" in value:
        raise MurError("E-DEPLOY-001", f"{where}: the value of {key} contains a newline or NUL, which an env file cannot carry")


def _quote_env(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return f'"{escaped}"'


def render_env_file(env: dict[str, str] | tuple[tuple[str, str], ...]) -> bytes:
    """KEY="value" lines readable by systemd's EnvironmentFile= and by `mur supervise`."""
    items = env.items() if isinstance(env, dict) else env
    return "".join(f"{k}={_quote_env(v)}\n" for k, v in items).encode()


def read_env_file(text: str) -> dict[str, str]:
    """The inverse of render_env_file (also accepts unquoted values)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, _, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


# --- ports ------------------------------------------------------------------------------------


def listening_ports(proc_net_tcp: str) -> set[int]:
    """Ports in LISTEN state from the text of /proc/net/tcp and /proc/net/tcp6."""
    ports: set[int] = set()
    for line in proc_net_tcp.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[3] != "0A":
            continue
        try:
            ports.add(int(parts[1].rsplit(":", 1)[1], 16))
        except (IndexError, ValueError):
            continue
    return ports


def pick_port(dep_id: str, busy: set[int], salt: int = 0) -> int:
    """A stable port for a deployment: derived from its id, skipping ports already listening."""
    lo, hi = PORT_RANGE
    span = hi - lo
    start = int(hashlib.sha256(f"{dep_id}:{salt}".encode()).hexdigest(), 16) % span
    for i in range(span):
        port = lo + (start + i) % span
        if port not in busy:
            return port
    raise MurError("E-DEPLOY-007", "no free TCP port on the target")


# --- the release ------------------------------------------------------------------------------


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def capsule_digest(inp: ReleaseInputs) -> str:
    """What the capsule is: manifest, referenced files, workdir seed, artifacts."""
    return _digest({
        "manifest": inp.manifest.sha256,
        "files": sorted((f.rel, f.sha256) for f in inp.files),
        "workdir": sorted((f.rel, f.sha256, f.mode) for f in inp.workdir),
        "artifacts": sorted((a.name, a.version, a.sha256) for a in inp.artifacts),
    })


def config_digest(inp: ReleaseInputs) -> str:
    """How it runs: service settings and the environment (values hashed, never stored)."""
    s = inp.service
    return _digest({"port": s.port, "bind": s.bind, "restart": s.restart, "init": s.init, "user": s.user,
                    "memory": s.memory_bytes, "tasks": s.tasks_max, "env": sorted(s.env), "args": list(s.run_args)})


def release_digest(inp: ReleaseInputs) -> str:
    return _digest({"bundle": inp.bundle.sha256, "capsule": capsule_digest(inp), "config": config_digest(inp)})


def service_spec(layout: Layout, release_dir: str, svc: ServiceConfig) -> dict[str, Any]:
    """What `mur supervise` runs: read at each (re)start, paths through `current`."""
    return {
        "deployment_id": layout.dep_id,
        "release_dir": release_dir,
        "port": svc.port,
        "bind": svc.bind,
        "restart": svc.restart,
        "user": svc.user,
        "home": layout.home,
        "run_dir": layout.run_dir,
        "log_file": layout.log_file,
        "cgroup": {"name": layout.dep_id, "memory_bytes": svc.memory_bytes, "pids_max": svc.tasks_max},
        "run_args": list(svc.run_args),
    }


def run_argv(release_dir: str, port: int, bind: str, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The `mur run` command line of a release (deploy's contract: one JSON line on stdout)."""
    return [f"{release_dir}/mur", "run", "--manifest", f"{release_dir}/murmur.yaml",
            "--workdir", f"{release_dir}/workdir", "--json", "--bind", bind, "--port", str(port), *extra]


def plan_release(inp: ReleaseInputs) -> ReleasePlan:
    """Every step of putting one release on a target, up to (not including) starting it."""
    from mur.deploy.systemd import render_unit

    lay = Layout(inp.home, inp.dep_id)
    rel = lay.release(inp.n)
    svc = inp.service
    steps: list[Step] = [
        Mkdir(lay.bin_dir, 0o755), Mkdir(f"{lay.bin_dir}/.refs/{inp.bundle.name}", 0o755),
        Mkdir(lay.releases, 0o700), Mkdir(lay.run_dir, 0o700), Mkdir(lay.log_dir, 0o700),
        Mkdir(rel, 0o755), Mkdir(f"{rel}/workdir", 0o755),
    ]
    steps.append(Upload(inp.bundle.src, lay.bundle(inp.bundle.name), 0o755, inp.bundle.sha256,
                        inp.bundle.size, refs=lay.bundle_refs(inp.bundle.name)))
    for a in inp.artifacts:
        adir = lay.artifact_dir(a.name, a.version)
        steps.append(Mkdir(adir, 0o755))
        for f in a.files:
            steps.append(Upload(f.src, f"{adir}/{f.rel}", 0o644, f.sha256, f.size, refs=f"{adir}/.refs"))
    if inp.precompiled:
        steps.append(Mkdir(lay.wasm_cache, 0o700))
        for f in inp.precompiled:
            steps.append(Upload(f.src, f"{lay.wasm_cache}/{f.rel}", 0o600, f.sha256, f.size,
                                refs=f"{lay.wasm_cache}/.refs/{f.rel}"))
    dirs = sorted({f.rel.rsplit("/", 1)[0] for f in inp.files if "/" in f.rel})
    dirs += sorted({"workdir/" + f.rel.rsplit("/", 1)[0] for f in inp.workdir if "/" in f.rel})
    steps += [Mkdir(f"{rel}/{d}", 0o755) for d in dirs]
    prev = lay.release(inp.prev_n) if inp.prev_n is not None and inp.prev_n != inp.n else None

    def alt(path: str) -> str | None:
        return f"{prev}/{path}" if prev else None

    steps.append(Upload(inp.manifest.src, f"{rel}/murmur.yaml", 0o644, inp.manifest.sha256, inp.manifest.size,
                        alt=alt("murmur.yaml")))
    for f in inp.files:
        steps.append(Upload(f.src, f"{rel}/{f.rel}", f.mode, f.sha256, f.size, alt=alt(f.rel)))
    for f in inp.workdir:
        steps.append(Upload(f.src, f"{rel}/workdir/{f.rel}", f.mode, f.sha256, f.size, alt=alt(f"workdir/{f.rel}")))
    steps.append(WriteFile(f"{rel}/env", render_env_file(svc.env), 0o600))
    steps.append(Symlink(lay.bundle(inp.bundle.name), f"{rel}/mur"))
    spec = service_spec(lay, lay.current, svc)
    steps.append(WriteFile(f"{rel}/service.json", (json.dumps(spec, indent=2) + "\n").encode(), 0o644))
    unit = render_unit(lay, svc, capsule=inp.capsule_name)
    steps.append(WriteFile(f"{rel}/{lay.unit_name}", unit.encode(), 0o644))
    digest = release_digest(inp)
    meta = {
        "n": inp.n, "digest": digest, "capsule_digest": capsule_digest(inp), "config_digest": config_digest(inp),
        "bundle": inp.bundle.name, "bundle_version": inp.bundle.version, "bundle_sha256": inp.bundle.sha256,
        "capsule": {"name": inp.capsule_name, "version": inp.capsule_version},
        "artifacts": [{"name": a.name, "version": a.version, "sha256": a.sha256} for a in inp.artifacts],
        "precompiled": [f.rel for f in inp.precompiled],
        "port": svc.port, "init": svc.init, "restart": svc.restart,
    }
    steps.append(WriteFile(f"{rel}/release.json", (json.dumps(meta, indent=2) + "\n").encode(), 0o644))
    verify = Run(f"{shlex.quote(lay.bundle(inp.bundle.name))} --version", label="runtime version")
    return ReleasePlan(
        layout=lay, release_dir=rel, digest=digest, capsule_digest=meta["capsule_digest"],
        config_digest=meta["config_digest"], prepare=tuple(steps), verify_runtime=verify,
        activate=tuple(activate_steps(lay, inp.n, svc.init, inp.sudo)), service_spec=spec, release_meta=meta,
    )


def artifact_verify_command(inp: ReleaseInputs) -> str | None:
    """One command checking every uploaded artifact zip against its digest on the target."""
    lay = Layout(inp.home, inp.dep_id)
    lines = [f"{a.sha256}  {lay.artifact_dir(a.name, a.version)}/{a.zip_name}" for a in inp.artifacts]
    if not lines:
        return None
    return f"printf '%s\\n' {' '.join(shlex.quote(x) for x in lines)} | sha256sum -c --quiet -"


def activate_steps(lay: Layout, n: int, init: str, sudo: bool) -> list[Step]:
    """Switch `current` to release n and (re)start the service from it."""
    steps: list[Step] = [Symlink(f"releases/{n}", lay.current)]
    return steps + start_steps(lay, init, sudo, restart=True)


def start_steps(lay: Layout, init: str, sudo: bool, restart: bool = False) -> list[Step]:
    """Start (or restart) the service of `current`; `sudo`: elevate privileged commands."""
    q = shlex.quote
    if init == "systemd":
        unit_src = f"{lay.current}/{lay.unit_name}"
        verb = "restart" if restart else "start"
        return [
            Run(f"install -m 0644 {q(unit_src)} {q(lay.unit_path)} && systemctl daemon-reload", sudo=sudo,
                label="install unit"),
            Run(f"systemctl enable --quiet {lay.unit_name} && systemctl {verb} {lay.unit_name}", sudo=sudo,
                label="start unit"),
        ]
    stop = stop_steps(lay, init, sudo) if restart else []
    # Detached by the shell (setsid -f, stdio to the log): no extra runtime start just to fork
    # (each costs seconds on an emulated VM).
    pidf, state = q(lay.run_dir + "/supervisor.pid"), q(lay.run_dir + "/state.json")
    start = (f"p=$(cat {pidf} 2>/dev/null); if [ -n \"$p\" ] && [ -d /proc/$p ]; then echo already running; else "
             f"rm -f {state} {pidf}; cd / && MUR_RUNTIME_DIR={q(lay.runtime_dir)} setsid -f {q(lay.current + '/mur')} "
             f"supervise --foreground "
             f"--spec {q(lay.current + '/service.json')} </dev/null >>{q(lay.log_file)} 2>&1; fi")
    return stop + [Run(start, sudo=sudo, label="start supervisor")]


def stop_steps(lay: Layout, init: str, sudo: bool) -> list[Step]:
    q = shlex.quote
    if init == "systemd":
        return [Run(f"systemctl stop {lay.unit_name}", sudo=sudo, check=False, label="stop unit")]
    # SIGTERM: the supervisor stops the service, kills what is left in its cgroup and exits. Wait up
    # to 60 s, then SIGKILL it and the service's process group.
    pidf, state = q(lay.run_dir + "/supervisor.pid"), q(lay.run_dir + "/state.json")
    cmd = (f"p=$(cat {pidf} 2>/dev/null); if [ -n \"$p\" ] && [ -d /proc/$p ]; then kill -TERM $p; i=0; "
           f"while [ -d /proc/$p ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; "
           f"if [ -d /proc/$p ]; then kill -KILL $p; "
           f"c=$(sed -n 's/.*\"child_pid\": *\\([0-9][0-9]*\\).*/\\1/p' {state}); "
           f"[ -n \"$c\" ] && kill -KILL -- -$c; fi; fi; rm -f {pidf}; true")
    return [Run(cmd, sudo=sudo, check=False, label="stop supervisor")]


def destroy_steps(lay: Layout, init: str, sudo: bool, bundles: list[str], artifacts: list[tuple[str, str]],
                  precompiled: list[str] = ()) -> list[Step]:
    """Stop, remove the unit and the deployment's files, drop references to shared files."""
    q = shlex.quote
    steps = stop_steps(lay, init, sudo)
    if init == "systemd":
        steps.append(Run(f"systemctl disable --quiet {lay.unit_name} 2>/dev/null; rm -f {q(lay.unit_path)}; "
                         f"systemctl daemon-reload; systemctl reset-failed {lay.unit_name} 2>/dev/null; true",
                         sudo=sudo, check=False, label="remove unit"))
    # Run and log files may belong to root (a supervisor started through sudo).
    steps.append(Run(f"rm -rf {q(lay.root)}", sudo=sudo, label="remove deployment files"))
    for name in bundles:
        refs = lay.bundle_refs(name)
        steps.append(Run(f"rm -f {q(refs + '/' + lay.dep_id)}; if rmdir {q(refs)} 2>/dev/null; then rm -f "
                         f"{q(lay.bundle(name))}; rm -rf {q(lay.runtime_dir)}/{q(name)}-*; fi; true", sudo=sudo,
                         check=False, label=f"release {name}"))
    for name in precompiled:
        refs = f"{lay.wasm_cache}/.refs/{name}"
        steps.append(Run(f"rm -f {q(refs + '/' + lay.dep_id)}; if rmdir {q(refs)} 2>/dev/null; then rm -f "
                         f"{q(lay.wasm_cache + '/' + name)}; fi; true", check=False, label="release compiled component"))
    for name, version in artifacts:
        adir = lay.artifact_dir(name, version)
        steps.append(Run(f"rm -f {q(adir + '/.refs/' + lay.dep_id)}; if rmdir {q(adir + '/.refs')} 2>/dev/null; then "
                         f"rm -rf {q(adir)}; rmdir {q(lay.artifacts + '/' + name)} 2>/dev/null; fi; true",
                         check=False, label=f"release {name}@{version}"))
    return steps


def prune_command(lay: Layout, keep: list[int]) -> str:
    """Remove releases other than `keep` (the current and previous few)."""
    keep_set = " ".join(str(k) for k in sorted(set(keep)))
    return (f"cd {shlex.quote(lay.releases)} 2>/dev/null && for r in *; do case \" {keep_set} \" in "
            f"*\" $r \"*) ;; *) rm -rf -- \"$r\";; esac; done; true")
