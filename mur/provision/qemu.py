"""Booting a VM image under qemu: the command line (pure), the NoCloud seed, the accelerator.

Networking is user-mode (slirp) with restrict=on: the guest reaches nothing, and one hostfwd
from 127.0.0.1:<port> to its sshd is the only way in. The kernel is booted directly (-kernel),
so a guest reboot comes back on the same kernel and command line. Each VM writes to its own
qcow2 overlay; the image's disk is never changed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from mur.errors import MurError

ISO_TOOLS = ("genisoimage", "xorrisofs", "mkisofs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kvm_usable() -> bool:
    """KVM when /dev/kvm opens and the CPU has hardware virtualization; else TCG.

    A /dev/kvm without vmx/svm (e.g. a PVM-backed one inside a microVM) accepts KVM_CREATE_VM but
    cannot run a stock kernel, so the CPU flags decide, not the device alone.
    """
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f" {f}" in flags for f in ("vmx", "svm"))


def choose_accel(requested: str = "auto") -> str:
    requested = os.environ.get("MUR_VM_ACCEL", requested) if requested == "auto" else requested
    if requested not in ("auto", "kvm", "tcg"):
        raise MurError("E-VM-002", f"unknown accelerator {requested!r}", "use auto, kvm or tcg")
    if requested == "auto":
        return "kvm" if kvm_usable() else "tcg"
    return requested


def command(*, vmlinuz: Path, initrd: Path, disk: Path, port: int, serial: Path, seed: Path | None = None,
            memory_mb: int = 2048, cpus: int = 2, accel: str = "tcg", append: str = "") -> list[str]:
    """The qemu-system-x86_64 argv for one VM (no monitor, no display, serial to a file)."""
    cpu = ["-cpu", "host"] if accel == "kvm" else ["-cpu", "max"]
    kernel_args = "root=/dev/vda rw console=ttyS0 quiet" + (f" {append}" if append else "")
    cmd = [
        "qemu-system-x86_64", "-accel", accel, *cpu, "-m", str(memory_mb), "-smp", str(cpus), "-nographic",
        "-kernel", str(vmlinuz), "-initrd", str(initrd), "-append", kernel_args,
        "-drive", f"file={disk},format=qcow2,if=virtio",
        "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22",
        "-device", "virtio-net-pci,netdev=n0",
        "-monitor", "none", "-serial", f"file:{serial}", "-display", "none",
    ]
    if seed is not None:
        cmd += ["-drive", f"file={seed},format=raw,if=virtio,readonly=on"]
    return cmd


def overlay(base: Path, path: Path) -> Path:
    """A qcow2 overlay on the (raw) image disk: the VM's own writes, the image untouched."""
    tool = shutil.which("qemu-img")
    if tool is None:
        raise MurError("E-VM-002", "qemu-img is not installed", "apt-get install qemu-utils")
    proc = subprocess.run([tool, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(base), str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise MurError("E-VM-002", f"qemu-img create failed: {proc.stderr.strip()}")
    return path


def seed_iso(path: Path, user_data: str, meta_data: str, vendor_data: str | None = None) -> Path:
    """A NoCloud seed: an ISO 9660 volume labelled cidata with user-data, meta-data and, when given,
    vendor-data (cloud-config merged under the user-data's: the user-data wins)."""
    tool = next((t for t in ISO_TOOLS if shutil.which(t)), None)
    if tool is None:
        raise MurError("E-VM-002", "making the cloud-init seed needs genisoimage (or xorriso)",
                       "apt-get install genisoimage")
    with tempfile.TemporaryDirectory(prefix="mur-seed-") as d:
        files = {"user-data": user_data, "meta-data": meta_data}
        if vendor_data is not None:
            files["vendor-data"] = vendor_data
        for name, text in files.items():
            (Path(d) / name).write_text(text)
        tmp = path.with_suffix(".tmp")
        proc = subprocess.run([tool, "-quiet", "-output", str(tmp), "-volid", "cidata", "-joliet", "-rock",
                               *(str(Path(d) / name) for name in files)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise MurError("E-VM-002", f"{tool} failed: {proc.stderr.strip()[-500:]}")
        os.chmod(tmp, 0o600)  # it may carry the VM's host private key
        os.replace(tmp, path)
    return path


def missing() -> list[str]:
    """Debian packages `mur vm create` needs that are absent here."""
    need = {"qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils", "ssh-keygen": "openssh-client",
            "ssh": "openssh-client"}
    out = {pkg for tool, pkg in need.items() if shutil.which(tool) is None}
    if not any(shutil.which(t) for t in ISO_TOOLS):
        out.add("genisoimage")
    return sorted(out)
