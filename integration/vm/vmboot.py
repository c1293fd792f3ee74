"""Boot the deploy test VM (integration/vm/build-vm.sh) under qemu TCG and reach it over SSH.

    vm = boot_vm(build_vm())        # ~25 s to SSH on this machine
    vm.ssh_port, vm.key, vm.known_hosts   # host key pinned from the build: nothing is trusted blindly
    vm.close()                      # poweroff, then kill qemu if it lingers

Networking: user-mode (slirp) with restrict=on, so the guest reaches nothing, and one hostfwd from
127.0.0.1:<free port> to the guest's sshd (environment.md section 11). `-snapshot` keeps the disk
image unchanged between runs. `/dev/kvm` here is PVM-backed and cannot boot a stock kernel: TCG.
Run `python integration/vm/vmboot.py` to boot it by hand (prints an ssh command, Ctrl-C stops).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build_vm(timeout: float = 1800) -> Path:
    """Run build-vm.sh (a no-op when its cached output exists); returns the image directory."""
    proc = subprocess.run(["bash", str(HERE / "build-vm.sh")], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"build-vm.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VM:
    image_dir: Path
    ssh_port: int
    proc: subprocess.Popen
    workdir: Path
    boot_seconds: float = 0.0

    @property
    def key(self) -> str:
        return str(self.image_dir / "id_ed25519")

    @property
    def host_key_line(self) -> str:
        kind, b64 = (self.image_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.ssh_port} {kind} {b64}"

    def write_known_hosts(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.host_key_line + "\n")
        return path

    @property
    def serial_log(self) -> Path:
        return self.workdir / "serial.log"

    def ssh(self, command: str, user: str = "root", timeout: float = 300) -> subprocess.CompletedProcess:
        """Run a command in the guest with the system ssh client (host key pinned)."""
        kh = self.write_known_hosts(self.workdir / "known_hosts")
        return subprocess.run(
            ["ssh", "-o", f"UserKnownHostsFile={kh}", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
             "-o", "LogLevel=ERROR", "-i", self.key, "-p", str(self.ssh_port), f"{user}@127.0.0.1", command],
            capture_output=True, text=True, timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ssh("systemctl poweroff", timeout=20)
            except (subprocess.TimeoutExpired, OSError):
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _banner(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            s.settimeout(5)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def boot_vm(image_dir: Path, memory_mb: int = 2048, cpus: int = 2, timeout: float = 240) -> VM:
    """Start qemu (TCG) on the image and wait until sshd answers; raises RuntimeError on failure."""
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise RuntimeError("qemu-system-x86_64 is not installed")
    work = Path(tempfile.mkdtemp(prefix="mur-vm-"))
    port = free_port()
    cmd = [
        qemu, "-accel", "tcg", "-cpu", "max", "-m", str(memory_mb), "-smp", str(cpus), "-nographic",
        "-kernel", str(image_dir / "vmlinuz"), "-initrd", str(image_dir / "initrd.img"),
        "-append", "root=/dev/vda rw console=ttyS0 quiet",
        "-drive", f"file={image_dir / 'disk.img'},format=raw,if=virtio", "-snapshot",
        "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22",
        "-device", "virtio-net-pci,netdev=n0",
        "-monitor", "none", "-serial", f"file:{work / 'serial.log'}", "-display", "none",
    ]
    start = time.monotonic()
    out = open(work / "qemu.out", "wb")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    vm = VM(image_dir, port, proc, work)
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"qemu exited ({proc.returncode}): {(work / 'qemu.out').read_text()[-2000:]}")
        if _banner(port):
            # sshd answers before authorized logins work on a cold boot: wait for a real command.
            while time.monotonic() - start < timeout:
                if vm.ssh("true", timeout=30).returncode == 0:
                    vm.boot_seconds = time.monotonic() - start
                    return vm
                time.sleep(1)
        time.sleep(1)
    tail = vm.serial_log.read_text(errors="replace")[-3000:] if vm.serial_log.exists() else ""
    vm.close()
    raise RuntimeError(f"the VM did not answer SSH within {timeout:.0f}s; serial log tail:\n{tail}")


if __name__ == "__main__":
    image = build_vm()
    vm = boot_vm(image)
    print(f"booted in {vm.boot_seconds:.1f}s; ssh -i {vm.key} -p {vm.ssh_port} "
          f"-o UserKnownHostsFile={vm.write_known_hosts(vm.workdir / 'known_hosts')} root@127.0.0.1")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        vm.close()
        os._exit(0)
