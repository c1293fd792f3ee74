"""Value types of deploy (a leaf: it imports nothing of mur.deploy).

Steps are what a plan is made of and what a Target executes (mur.deploy.apply); Layout says where
a deployment lives on a target; ServiceConfig is how its service runs. Everything is frozen, so
plans compare as data in tests (kamal's Printer model: commands as values).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Union

from mur.resolve.files import FileRef

__all__ = ["Mkdir", "Upload", "WriteFile", "Symlink", "Run", "Step", "FileRef", "BundleRef",
           "Layout", "ServiceConfig", "ServiceState", "Tls"]


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
    # a shared file (runtime, artifact, compiled component) is copied into this per-deploy staging
    # directory first and renamed into place, so an interrupted copy never lies beside the file
    scratch: str | None = None


@dataclass(frozen=True)
class WriteFile:
    """Write `content` to `dst` atomically with `mode` (private from the first byte); skipped when unchanged."""

    dst: str
    content: bytes
    mode: int = 0o644

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


# Atomic replacements write a temporary name beside what they replace and rename it over:
# `<link>.mur-tmp` (Symlink), `<name>.mur-tmp-<hex>` (uploads). A command killed between the two
# leaves it; these globs, relative to a deployment's root, are where `status` looks for such names
# (mur.deploy.observe) and what the next deploy or `gc` sweeps (mur.deploy.cleanup).
TMP_MARK = ".mur-tmp"
DEPLOYMENT_TMP_GLOBS = ("*.mur-tmp*", "releases/*/*.mur-tmp*")


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
    # The root helper's subcommand that does the privileged part of `cmd` on a prepared host (where
    # the deploy user may run only the helper as root); a step without one needs no root there.
    helper: tuple[str, ...] = ()
    # Run first, as the connecting user (never elevated), in the same remote command: `cmd` runs only
    # when it succeeded. What must not be split from `cmd` by a lost link (the switch of `current`
    # before the restart: sent together, they run to their end together).
    first: str = ""


Step = Union[Mkdir, Upload, WriteFile, Symlink, Run]


@dataclass(frozen=True)
class BundleRef:
    name: str  # mur-<version>-<platform>
    src: str
    sha256: str
    version: str
    size: int = 0


@dataclass(frozen=True)
class Tls:
    """The service's certificate and key (local files), and the pin clients verify."""

    cert: FileRef
    key: FileRef
    pin_sha256: str  # SHA-256 of the certificate's DER form


@dataclass(frozen=True)
class Layout:
    """Where things live on one target for one deployment (all under the target user's home)."""

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
    def probe_cache(self) -> str:
        """The runtime's kernel-probe cache (mur.sandbox.probecache), written by every `mur run` there."""
        return f"{self.murmur}/cache/probe"

    @property
    def disk_templates(self) -> str:
        """The runtime's formatted session-disk images (mur.sandbox.disk), written by `mur run` there."""
        return f"{self.murmur}/cache/disk"

    @property
    def digest_cache(self) -> str:
        """The runtime's remembered file digests (mur.wasm.sources), written by every `mur run` there."""
        return f"{self.murmur}/cache/wasm-digests"

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
    def previous(self) -> str:
        """Symlink to the release that served before `current` was switched to what it names now:
        where rollback goes (the target's own history, whatever the records say)."""
        return f"{self.root}/previous"

    @property
    def run_dir(self) -> str:
        return f"{self.root}/run"

    @property
    def supervisor_pid(self) -> str:
        return f"{self.run_dir}/supervisor.pid"

    @property
    def child_pid(self) -> str:
        return f"{self.run_dir}/child.pid"

    @property
    def state_file(self) -> str:
        return f"{self.run_dir}/state.json"

    @property
    def cgroups_file(self) -> str:
        """The supervisor's cgroup directories, one per line (for a stop that finds it dead)."""
        return f"{self.run_dir}/cgroups"

    @property
    def log_dir(self) -> str:
        return f"{self.root}/logs"

    @property
    def log_file(self) -> str:
        return f"{self.log_dir}/service.log"

    @property
    def tmp_dir(self) -> str:
        """The service's TMPDIR: staged tool payloads live here, swept at each start, gone with destroy."""
        return f"{self.root}/tmp"

    @property
    def staging(self) -> str:
        """This deployment's staging area: releases being built, shared files being copied. Only a
        command holding the deployment's lock writes or sweeps it; nothing in it is ever served."""
        return f"{self.murmur}/staging/{self.dep_id}"

    def stage(self, n: int, nonce: str) -> str:
        return f"{self.staging}/release-{n}-{nonce}"

    def scratch(self, nonce: str) -> str:
        return f"{self.staging}/shared-{nonce}"

    @property
    def locks(self) -> str:
        return f"{self.murmur}/locks"

    # Per-release material: each release reads its own env file, token, certificate and key, so a
    # new release's material never replaces what the serving one reads (until the switch).
    @staticmethod
    def token_file(release: str) -> str:
        """The A2A bearer token (0600) of a release (the same value for every release of a deployment)."""
        return f"{release}/a2a-token"

    @staticmethod
    def tls_cert(release: str) -> str:
        return f"{release}/tls/cert.pem"

    @staticmethod
    def tls_key(release: str) -> str:
        return f"{release}/tls/key.pem"

    @property
    def boot_script(self) -> str:
        """What a boot hook (cron @reboot) runs: the start command of the supervisor."""
        return f"{self.root}/boot.sh"

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
    keep_sessions: int = 5  # past session directories kept per deployment
    boot: str = "none"  # what brings it back after a reboot: "systemd" | "cron" | "docker" | "none"
    tls: bool = False  # the service speaks HTTPS with the deployment's certificate
    tls_pin: str = ""  # the certificate's SHA-256 (part of the config: a new cert is a new release)


@dataclass(frozen=True)
class ServiceState:
    """The service as the init system reports it (read with the shell: no runtime start).

    `running`: the process is up or restarting; `ready`: the runtime printed its startup line, i.e.
    staging and compilation are done (its A2A port answers earlier than that); `exited`: it stopped
    on its own or failed, and will not come back by itself; `looping`: it keeps exiting and being
    restarted (`restarts` so far, the status of the last exit in `last_exit`).
    """

    state: str
    running: bool = False
    ready: bool = False
    exited: bool = False
    restarts: int = 0
    pid: int | None = None
    detail: tuple[tuple[str, str], ...] = ()
    looping: bool = False
    last_exit: int | None = None

    def to_dict(self) -> dict:
        return {"state": self.state, "running": self.running, "ready": self.ready, "restarts": self.restarts,
                "pid": self.pid, "last_exit": self.last_exit, "crash_looping": self.looping, **dict(self.detail)}
