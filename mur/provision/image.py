"""Debian 12 VM images for `mur vm`, built locally with debootstrap (no image download, no registry).

An image is a raw ext4 disk plus the kernel and initrd qemu boots directly, cached under
``images_dir()/<key>`` where the key hashes every input (suite, kernel, packages, the files
copied in). The guest gets no network at run time (qemu's restrict=on), so everything is baked
in here: systemd with pure cgroup v2, openssh, sudo, python3, libseccomp2 and cloud-init (which
turns the host into a mur deploy host from deploy/'s user-data at first boot). Root logs in with
the image's own key; a per-VM deploy user and host key come from the user-data.

Builds share one debootstrap (the base rootfs tarball) across kernels; a file lock makes two
parallel builds wait for it instead of running it twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from mur.errors import MurError
from mur.provision import assets
from mur.provision.reporter import QUIET, Reporter

FORMAT = 1  # bump when the build steps change in a way the inputs do not show
SUITE = "bookworm"
# Kernel choice -> (Debian package, Landlock ABI it brings, where it comes from)
KERNELS = {
    "6.1": ("linux-image-cloud-amd64", 2, "bookworm"),
    "6.12": ("linux-image-6.12-cloud-amd64", 6, "bookworm-security"),
}
# debootstrap's own dependency order cannot configure cloud-init's Python stack: apt installs those.
BASE_PACKAGES = ("systemd-sysv", "udev", "dbus", "openssh-server", "sudo", "python3", "iproute2", "libseccomp2",
                 "ca-certificates", "procps")
APT_PACKAGES = ("cloud-init", "kmod", "initramfs-tools")
TOOLS = {"debootstrap": "debootstrap", "mkfs.ext4": "e2fsprogs", "chroot": "coreutils", "ssh-keygen": "openssh-client"}


def default_mirror() -> str:
    return os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")


def images_dir() -> Path:
    """$MUR_VM_IMAGES, else ~/.murmur/vm/images (CI points it at its cache)."""
    from mur.paths import murmur_home

    env = os.environ.get("MUR_VM_IMAGES")
    return Path(env) if env else murmur_home() / "vm" / "images"


@dataclass(frozen=True)
class ImageSpec:
    kernel: str = "6.1"
    size_mb: int = 4096

    def validate(self) -> None:
        if self.kernel not in KERNELS:
            raise MurError("E-VM-001", f"unknown kernel {self.kernel!r}", f"choose one of: {', '.join(KERNELS)}")

    def base_key(self) -> str:
        return _digest({"format": FORMAT, "suite": SUITE, "packages": BASE_PACKAGES, "apt": APT_PACKAGES})

    def key(self) -> str:
        return _digest({"base": self.base_key(), "kernel": KERNELS[self.kernel], "size_mb": self.size_mb,
                        "vm_cfg": hashlib.sha256(assets.read_bytes("vm/99-mur-vm.cfg")).hexdigest()})


@dataclass(frozen=True)
class Image:
    dir: Path
    spec: ImageSpec
    kernel_release: str

    @property
    def disk(self) -> Path:
        return self.dir / "disk.img"

    @property
    def vmlinuz(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    @property
    def root_key(self) -> Path:
        """The private key root's authorized_keys carries (every VM of this image)."""
        return self.dir / "id_ed25519"

    @property
    def host_key_pub(self) -> str:
        """The host key baked into the image (a VM booted without user-data keeps it)."""
        return (self.dir / "ssh_host_ed25519_key.pub").read_text().strip()

    @property
    def landlock_abi(self) -> int:
        return KERNELS[self.spec.kernel][1]


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def cached(spec: ImageSpec, root: Path | None = None) -> Image | None:
    d = (root or images_dir()) / spec.key()
    meta = d / "image.json"
    if not (meta.is_file() and (d / "disk.img").is_file()):
        return None
    try:
        return Image(d, spec, json.loads(meta.read_text())["kernel_release"])
    except (ValueError, KeyError):
        return None


def missing_tools() -> list[str]:
    return sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})


def ensure_image(spec: ImageSpec, reporter: Reporter = QUIET, root: Path | None = None) -> Image:
    """The cached image for `spec`, built first when absent (root only: debootstrap and chroot)."""
    spec.validate()
    root = root or images_dir()
    hit = cached(spec, root)
    if hit:
        return hit
    if os.geteuid() != 0:
        raise MurError("E-VM-001", "building a VM image needs root (debootstrap, chroot)",
                       "run the first `mur vm create` for this kernel as root; later ones reuse the cached image")
    missing = missing_tools()
    if missing:
        raise MurError("E-VM-001", f"building a VM image needs: {' '.join(missing)}",
                       f"apt-get install {' '.join(missing)}")
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root / f".{spec.key()}.lock"):
        hit = cached(spec, root)
        if hit:
            return hit
        base = _base_rootfs(spec, root, reporter)
        return _build(spec, base, root, reporter)


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str, *, timeout: float = 1800, line: Callable[[str], None] | None = None,
         env: dict | None = None) -> None:
    """Run a build command; its output goes to `line` (filtered progress) and the error on failure."""
    tail: list[str] = []
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                stdin=subprocess.DEVNULL, env=env)
    except OSError as exc:
        raise MurError("E-VM-001", f"{what}: {exc}") from exc
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for text in proc.stdout:
        tail = (tail + [text.rstrip()])[-40:]
        if line:
            line(text.rstrip())
        if time.monotonic() > deadline:
            proc.kill()
            break
    rc = proc.wait()
    if rc != 0:
        raise MurError("E-VM-001", f"{what} failed (exit {rc}):\n" + "\n".join(tail[-15:]),
                       "check the Debian mirror (DEBIAN_MIRROR) and free disk space, then retry")


def _debootstrap_line(reporter: Reporter) -> Callable[[str], None]:
    def line(text: str) -> None:
        # Stage lines only ("I: Retrieving Packages", "I: Installing core packages...", ...), not one per package.
        if not text.startswith("I: ") or re.match(r"^I: \w+ [^ ]+\.\.\.$", text):
            return
        if text.endswith("...") or "successfully" in text or "Release" in text:
            reporter.note(text[3:])
    return line


def _base_rootfs(spec: ImageSpec, root: Path, reporter: Reporter) -> Path:
    tarball = root / f"base-{SUITE}-{spec.base_key()}.tar"
    with _lock(root / f".base-{spec.base_key()}.lock"):
        if tarball.is_file():
            return tarball
        work = Path(tempfile.mkdtemp(prefix="mur-vm-base-", dir=root))
        try:
            rootfs = work / "rootfs"
            with reporter.step(f"debootstrap {SUITE} with systemd, openssh and cloud-init (about 2 min)"):
                _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(rootfs),
                      default_mirror()], "debootstrap", line=_debootstrap_line(reporter))
            with reporter.step(f"apt-get install {' '.join(APT_PACKAGES)}"):
                _apt_install(rootfs, APT_PACKAGES)
            with reporter.step("pack the base rootfs"):
                _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball) + ".tmp", "."], "tar")
                os.replace(str(tarball) + ".tmp", tarball)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tarball


SOURCES = """deb {mirror} bookworm main
deb {mirror} bookworm-updates main
deb {security} bookworm-security main
"""
SSHD = """HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
"""


def _security_mirror(mirror: str) -> str:
    return os.environ.get("DEBIAN_SECURITY_MIRROR", mirror.rstrip("/").removesuffix("/debian") + "/debian-security")


def _apt_install(R: Path, packages: tuple[str, ...]) -> None:
    """apt-get install inside the rootfs (the host's network and resolver, /proc mounted)."""
    mirror = default_mirror()
    (R / "etc/apt/sources.list").write_text(SOURCES.format(mirror=mirror, security=_security_mirror(mirror)))
    resolv = R / "etc/resolv.conf"
    saved = resolv.read_bytes() if resolv.is_file() and not resolv.is_symlink() else None
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    shutil.copyfile("/etc/resolv.conf", resolv)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    _run(["mount", "-t", "proc", "proc", str(R / "proc")], "mount /proc in the rootfs")
    try:
        _run(["chroot", str(R), "apt-get", "update", "-q"], "apt-get update", env=env)
        _run(["chroot", str(R), "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
             f"apt-get install {' '.join(packages)}", env=env)
        _run(["chroot", str(R), "apt-get", "clean"], "apt-get clean", env=env)
    finally:
        subprocess.run(["umount", "-l", str(R / "proc")], check=False)
        resolv.unlink()
        if saved is not None:
            resolv.write_bytes(saved)


def _build(spec: ImageSpec, base: Path, root: Path, reporter: Reporter) -> Image:
    pkg, abi, suite = KERNELS[spec.kernel]
    out = root / spec.key()
    work = Path(tempfile.mkdtemp(prefix=f"mur-vm-{spec.kernel}-", dir=root))
    R = work / "rootfs"
    try:
        R.mkdir()
        with reporter.step(f"kernel {spec.kernel} ({pkg} from {suite}, Landlock ABI {abi})"):
            _run(["tar", "-C", str(R), "--numeric-owner", "-xf", str(base)], "unpack the base rootfs")
            _apt_install(R, (pkg,))
        with reporter.step("configure the guest"):
            _configure(R, out)
        with reporter.step(f"make the {spec.size_mb} MiB disk"):
            release = _copy_kernel(R, out)
            disk = out / "disk.img.tmp"
            with open(disk, "wb") as fh:
                fh.truncate(spec.size_mb << 20)
            _run(["mkfs.ext4", "-q", "-F", "-L", "root", "-d", str(R), str(disk)], "mkfs.ext4")
            os.replace(disk, out / "disk.img")
        meta = {"spec": asdict(spec), "key": spec.key(), "kernel_package": pkg, "kernel_release": release,
                "landlock_abi": abi, "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (out / "image.json.tmp").write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(out / "image.json.tmp", out / "image.json")  # last: it marks the image complete
        return Image(out, spec, release)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _configure(R: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (R / "etc/hostname").write_text("murvm\n")
    (R / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 murvm\n")
    (R / "etc/fstab").write_text("/dev/vda / ext4 rw,errors=remount-ro 0 1\n")
    (R / "etc/resolv.conf").write_text("")  # no network beyond the forwarded SSH port
    net = R / "etc/systemd/network"
    net.mkdir(parents=True, exist_ok=True)
    (net / "10-en.network").write_text("[Match]\nName=en*\n\n[Network]\nDHCP=yes\n")
    (R / "etc/cloud/cloud.cfg.d/99-mur-vm.cfg").write_bytes(assets.read_bytes("vm/99-mur-vm.cfg"))
    (R / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (R / "etc/ssh/sshd_config.d/mur-vm.conf").write_text(SSHD)
    for p in (R / "etc/ssh").glob("ssh_host_*"):
        p.unlink()
    for p in (out / "id_ed25519", out / "id_ed25519.pub"):
        p.unlink(missing_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mur-vm-root", "-f", str(out / "id_ed25519")], "ssh-keygen")
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "murvm", "-f", str(R / "etc/ssh/ssh_host_ed25519_key")],
         "ssh-keygen")
    shutil.copyfile(R / "etc/ssh/ssh_host_ed25519_key.pub", out / "ssh_host_ed25519_key.pub")
    ssh = R / "root/.ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copyfile(out / "id_ed25519.pub", ssh / "authorized_keys")
    os.chmod(ssh / "authorized_keys", 0o600)
    chroot = ["chroot", str(R), "systemctl"]
    _run(chroot + ["enable", "systemd-networkd", "ssh"], "systemctl enable")
    # Quieter, faster boots under emulation: nothing waits for a network that is not there.
    _run(chroot + ["mask", "systemd-networkd-wait-online.service", "apt-daily.timer", "apt-daily-upgrade.timer",
                   "e2scrub_all.timer", "fstrim.timer"], "systemctl mask")
    shutil.rmtree(R / "var/lib/apt/lists", ignore_errors=True)
    (R / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)


def _copy_kernel(R: Path, out: Path) -> str:
    kernels = sorted((R / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise MurError("E-VM-001", "the image has no kernel in /boot")
    vmlinuz = kernels[-1]
    release = vmlinuz.name.removeprefix("vmlinuz-")
    shutil.copyfile(vmlinuz, out / "vmlinuz")
    shutil.copyfile(R / "boot" / f"initrd.img-{release}", out / "initrd.img")
    return release
