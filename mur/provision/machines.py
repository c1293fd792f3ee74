"""Local VMs (`mur vm create | ls | ssh | destroy`): a cached image, a qcow2 overlay, a NoCloud
seed rendered from deploy/'s user-data, qemu in the background, SSH pinned to the VM's own host key.

Each VM lives in ``machines_dir()/<name>/``: machine.json (the record), disk.qcow2, seed.iso,
id_ed25519 (the client key, authorized for the deploy user and root), host_ed25519 (its host
key, installed by cloud-init), known_hosts, serial.log, qemu.pid. `prepare=False` boots the bare
image instead (cloud-init disabled, image's host key, root only): a host for `mur host prepare`.

`user_data=` boots the operator's own user-data instead of deploy/'s (say, what the terraform
module rendered), unchanged. mur adds only NoCloud *vendor-data* holding the VM's host key (the
user-data wins over it: when it sets `ssh_keys` itself, that host key is the one pinned), waits
as root with the image's key (which cloud-init leaves alone), and logs in as the deploy user with
`login_key`, the key the user-data authorizes, when one is given.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.provision import console, qemu
from mur.provision.image import Image, ImageSpec, ensure_image
from mur.provision.reporter import QUIET, Reporter
from mur.provision.userdata import UserDataInputs, render, tf_json

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")


def machines_dir() -> Path:
    """$MUR_VM_DIR, else ~/.murmur/vm/machines."""
    from mur.paths import murmur_home

    env = os.environ.get("MUR_VM_DIR")
    return Path(env) if env else murmur_home() / "vm" / "machines"


@dataclass
class Machine:
    name: str
    dir: Path
    port: int
    pid: int
    kernel: str
    deploy_user: str  # "" for a bare VM (root only)
    accel: str
    image: str
    landlock_abi: int
    created: str = ""
    boot_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Path:
        """The deploy user's client key (the VM's own, or --ssh-key for a VM booted from --user-data)."""
        return Path(self.extra.get("login_key") or self.dir / "id_ed25519")

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def serial_log(self) -> Path:
        return self.dir / "serial.log"

    @property
    def login(self) -> str:
        return self.deploy_user or "root"

    def running(self) -> bool:
        """The recorded pid is alive and is this VM's qemu (never trust a recycled pid)."""
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return False
        return str(self.dir).encode() in cmdline and b"qemu-system" in cmdline

    @property
    def root_key(self) -> Path:
        """Root logs in with the image's key (the deploy user with the VM's own)."""
        return Path(self.extra.get("root_key") or self.key)

    def ssh_argv(self, user: str | None = None, command: list[str] | None = None, *, batch: bool = True,
                 key: Path | None = None) -> list[str]:
        """The system ssh client's argv for this VM, host key pinned."""
        user = user or self.login
        key = key or (self.root_key if user == "root" else self.key)
        return ["ssh", "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                *(["-o", "BatchMode=yes"] if batch else ["-t"]), "-o", "LogLevel=ERROR", "-i", str(key),
                "-p", str(self.port), f"{user}@127.0.0.1", *(command or [])]

    def ssh(self, command: str, user: str | None = None, timeout: float = 300,
            key: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.ssh_argv(user, [command], key=key), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def deploy_args(self) -> list[str]:
        return ["--host", "127.0.0.1", "--ssh-port", str(self.port), "--ssh-user", self.login,
                "--ssh-key", str(self.key), "--known-hosts", str(self.known_hosts)]

    def deploy_command(self) -> str:
        return "mur deploy " + " ".join(self.deploy_args())

    def prepare_command(self) -> str | None:
        """For a VM without a deploy user: the `mur host prepare` that makes one, logging in as root
        and authorizing this VM's key for the new user (its final check logs in with that key)."""
        if self.deploy_user:
            return None
        pub = Path(str(self.root_key) + ".pub")
        return (f"mur host prepare --host 127.0.0.1 --ssh-port {self.port} --ssh-user root --ssh-key {self.root_key} "
                f"--known-hosts {self.known_hosts} --authorized-key {pub}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update({"dir": str(self.dir), "running": self.running(), "key": str(self.key),
                  "known_hosts": str(self.known_hosts), "deploy_command": self.deploy_command(),
                  "prepare_command": self.prepare_command(), "ssh_command": " ".join(self.ssh_argv())})
        return d


@dataclass
class CreateRequest:
    name: str = ""
    kernel: str = "6.1"
    deploy_user: str = "mur"
    authorized_keys: tuple[str, ...] = ()  # besides the VM's own client key
    prepare: bool = True  # False: the bare image, for `mur host prepare`
    memory_mb: int = 2048
    cpus: int = 2
    accel: str = "auto"
    boot_timeout: float = 600.0
    # How the user-data is rendered (default mur.provision.userdata.render; the terraform module is
    # the other renderer of the same template).
    render_user_data: Callable[[UserDataInputs], str] | None = None
    user_data: str | None = None  # the operator's own user-data (--user-data FILE), booted unchanged
    login_key: Path | None = None  # with user_data: the private key it authorizes for deploy_user


def _check_name(name: str) -> str:
    if not _NAME.match(name):
        raise MurError("E-VM-002", f"bad VM name {name!r}", "use lowercase letters, digits and -, at most 31 characters")
    return name


def _keygen(path: Path, comment: str) -> str:
    for p in (path, path.with_suffix(".pub")):
        p.unlink(missing_ok=True)
    proc = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise MurError("E-VM-002", f"ssh-keygen failed: {proc.stderr.strip()}")
    return Path(str(path) + ".pub").read_text().strip()


def create(req: CreateRequest, reporter: Reporter = QUIET, root: Path | None = None) -> Machine:
    """Build (or reuse) the image, boot a VM from it, wait until the deploy user can log in."""
    missing = qemu.missing()
    if missing:
        raise MurError("E-VM-002", f"mur vm needs: {' '.join(missing)}", f"apt-get install {' '.join(missing)}")
    root = root or machines_dir()
    name = _check_name(req.name or f"vm-{secrets.token_hex(3)}")
    vdir = root / name
    if (vdir / "machine.json").exists():
        raise MurError("E-VM-002", f"a VM named {name} already exists", f"mur vm destroy {name}, or pick another --name")
    image = ensure_image(ImageSpec(kernel=req.kernel), reporter)
    vdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        return _boot(req, name, vdir, image, reporter)
    except BaseException:
        _kill_recorded(vdir)
        shutil.rmtree(vdir, ignore_errors=True)
        raise


def _boot(req: CreateRequest, name: str, vdir: Path, image: Image, reporter: Reporter) -> Machine:
    seed = None
    extra: dict[str, Any] = {}
    if req.user_data is not None:
        host_pub = _own_user_data(req, name, vdir, image)
        seed = vdir / "seed.iso"
        if req.login_key is not None:
            extra["login_key"] = str(Path(req.login_key).expanduser().resolve())
    elif req.prepare:
        client = _keygen(vdir / "id_ed25519", f"mur-vm-{name}")
        host_pub = _keygen(vdir / "host_ed25519", name)
        inputs = UserDataInputs(ssh_authorized_keys=(client, *req.authorized_keys), deploy_user=req.deploy_user,
                                kernel="keep", ssh_host_key_public=host_pub,
                                ssh_host_key_private=(vdir / "host_ed25519").read_text())
        user_data = (req.render_user_data or render)(inputs)
        (vdir / "user-data").write_text(user_data)
        os.chmod(vdir / "user-data", 0o600)
        # root keeps the image's key; the VM's own client key is added for it too (for `mur vm ssh --root`)
        meta = f"instance-id: mur-{name}-{secrets.token_hex(4)}\nlocal-hostname: {name}\n"
        seed = qemu.seed_iso(vdir / "seed.iso", user_data, meta)
    else:
        shutil.copyfile(image.root_key, vdir / "id_ed25519")
        os.chmod(vdir / "id_ed25519", 0o600)
        shutil.copyfile(Path(str(image.root_key) + ".pub"), vdir / "id_ed25519.pub")
        host_pub = image.host_key_pub
    disk = qemu.overlay(image.disk, vdir / "disk.qcow2")
    accel = qemu.choose_accel(req.accel)
    port = qemu.free_port()
    (vdir / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_pub.split()[:2])}\n")
    argv = qemu.command(vmlinuz=image.vmlinuz, initrd=image.initrd, disk=disk, port=port, serial=vdir / "serial.log",
                        seed=seed, memory_mb=req.memory_mb, cpus=req.cpus, accel=accel,
                        append="" if req.prepare else "cloud-init=disabled")
    with open(vdir / "qemu.out", "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=vdir)
    (vdir / "qemu.pid").write_text(f"{proc.pid}\n")
    own = req.user_data is not None
    deploy_user = req.deploy_user if (req.prepare and not own) or (own and req.login_key is not None) else ""
    m = Machine(name, vdir, port, proc.pid, req.kernel, deploy_user, accel,
                image.spec.key(), image.landlock_abi, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                extra={"kernel_release": image.kernel_release, "memory_mb": req.memory_mb, "cpus": req.cpus,
                       "root_key": str(image.root_key), **({"user_data": "own"} if own else {}), **extra})
    _save(m)
    start = time.monotonic()
    # Waiting is done as root with the image's key where the user-data is the operator's: it may
    # create any user with any key, but it leaves root's key alone.
    wait_as = "root" if own else None
    with reporter.step(f"boot {name} (kernel {image.kernel_release}, {accel.upper()}"
                       + (", about a minute under emulation)" if accel == "tcg" else ")")):
        _wait_ssh(m, proc, start, req.boot_timeout, reporter, user=wait_as)
    if req.prepare or own:
        with reporter.step("cloud-init: " + ("run the given user-data" if own else "prepare the deploy host")):
            _wait_cloud_init(m, start, req.boot_timeout, user=wait_as)
    if own and deploy_user:
        res = m.ssh("true", timeout=120)
        if res.returncode != 0:
            raise MurError("E-VM-002", f"{deploy_user} cannot log in to {name} with {m.key}: "
                           f"{console.plain(res.stderr).strip()[-300:]}",
                           "the user-data must create that user and authorize the public half of --ssh-key "
                           "(or pass --deploy-user with the user it creates)")
    m.boot_seconds = round(time.monotonic() - start, 1)
    _save(m)
    return m


def user_data_host_key(text: str) -> str | None:
    """The ed25519 host public key a #cloud-config sets (`ssh_keys.ed25519_public`), else None."""
    import yaml

    if not text.startswith("#cloud-config"):
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MurError("E-VM-002", f"the user-data is not valid YAML: {exc}",
                       "check it with `cloud-init schema --config-file FILE`") from exc
    keys = data.get("ssh_keys") if isinstance(data, dict) else None
    public = keys.get("ed25519_public") if isinstance(keys, dict) else None
    return public.strip() if isinstance(public, str) and public.startswith("ssh-ed25519 ") else None


def _own_user_data(req: CreateRequest, name: str, vdir: Path, image: Image) -> str:
    """Write the seed for the operator's user-data; returns the host public key to pin."""
    text = req.user_data or ""
    pinned = user_data_host_key(text) or ""
    vendor = ""
    if not pinned:
        pinned = _keygen(vdir / "host_ed25519", name)
        vendor = "#cloud-config\n" + tf_json({"ssh_keys": {"ed25519_private": (vdir / "host_ed25519").read_text(),
                                                            "ed25519_public": pinned}}) + "\n"
    shutil.copyfile(image.root_key, vdir / "id_ed25519")
    os.chmod(vdir / "id_ed25519", 0o600)
    (vdir / "user-data").write_text(text)
    os.chmod(vdir / "user-data", 0o600)
    meta = f"instance-id: mur-{name}-{secrets.token_hex(4)}\nlocal-hostname: {name}\n"
    qemu.seed_iso(vdir / "seed.iso", text, meta, vendor_data=vendor or None)
    return pinned


def _banner(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            s.settimeout(5)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _wait_ssh(m: Machine, proc: subprocess.Popen, start: float, timeout: float, reporter: Reporter,
              user: str | None = None) -> None:
    next_note = 20.0
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            out = console.plain((m.dir / "qemu.out").read_text(errors="replace"))[-1500:]
            raise MurError("E-VM-002", f"qemu exited ({proc.returncode}): {out}")
        # sshd answers before the login user exists on a cold boot: wait for a real command
        if _banner(m.port) and m.ssh("true", user=user, timeout=30).returncode == 0:
            return
        elapsed = time.monotonic() - start
        if elapsed >= next_note:
            reporter.note(f"waiting for SSH ({elapsed:.0f}s): {_serial_tail(m)}")
            next_note += 20.0
        time.sleep(1)
    tail = (console.tail(m.serial_log.read_text(errors="replace"), chars=2000) if m.serial_log.exists()
            else "(no console output)")
    raise MurError("E-VM-002", f"{m.name} did not answer SSH within {timeout:.0f}s; serial log tail:\n{tail}")


def _serial_tail(m: Machine) -> str:
    """The console's last line, as plain text (its escape sequences would act on the operator's terminal)."""
    try:
        last = console.tail(m.serial_log.read_text(errors="replace"), lines=1).strip()
    except OSError:
        return "no console output yet"
    return last[:100] or "no console output yet"


def _wait_cloud_init(m: Machine, start: float, timeout: float, user: str | None = None) -> None:
    left = max(30.0, timeout - (time.monotonic() - start))
    res = m.ssh("cloud-init status --wait --long", user=user, timeout=left)
    if res.returncode != 0 or "status: done" not in res.stdout:
        out = console.plain(res.stdout + res.stderr).strip()[-1500:]
        raise MurError("E-VM-002", f"cloud-init did not finish cleanly on {m.name}: {out}",
                       f"see {m.serial_log} and `mur vm ssh {m.name} --root -- cat /var/log/cloud-init-output.log`")


def _save(m: Machine) -> None:
    rec = asdict(m)
    rec["dir"] = str(m.dir)
    tmp = m.dir / "machine.json.tmp"
    tmp.write_text(json.dumps(rec, indent=2) + "\n")
    os.replace(tmp, m.dir / "machine.json")


def _load(path: Path) -> Machine:
    rec = json.loads(path.read_text())
    rec["dir"] = Path(rec["dir"])
    return Machine(**rec)


def list_machines(root: Path | None = None) -> list[Machine]:
    root = root or machines_dir()
    out = []
    for p in sorted(root.glob("*/machine.json")):
        try:
            out.append(_load(p))
        except (ValueError, TypeError, OSError):
            continue
    return out


def get(name: str, root: Path | None = None) -> Machine:
    p = (root or machines_dir()) / _check_name(name) / "machine.json"
    if not p.is_file():
        names = ", ".join(m.name for m in list_machines(root)) or "none"
        raise MurError("E-VM-002", f"no VM named {name}", f"known VMs: {names} (mur vm ls)")
    return _load(p)


def _kill_recorded(vdir: Path) -> None:
    try:
        pid = int((vdir / "qemu.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if str(vdir).encode() in cmdline:
        _stop_pid(pid, grace=0)


def _stop_pid(pid: int, grace: float) -> None:
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.5)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(40):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.1)


def stop(m: Machine, grace: float = 5.0) -> None:
    """Stop the VM's qemu (SIGTERM, then SIGKILL after `grace`); its overlay disk is all it leaves."""
    if not m.running():
        return
    try:
        os.kill(m.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    _stop_pid(m.pid, grace)


def destroy(name: str, root: Path | None = None) -> dict[str, Any]:
    m = get(name, root)
    was = m.running()
    stop(m)
    shutil.rmtree(m.dir, ignore_errors=True)
    return {"name": m.name, "was_running": was, "removed": str(m.dir)}
