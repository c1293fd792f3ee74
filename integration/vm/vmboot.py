"""The test fixtures' view of mur's own VMs (mur.provision): what `mur vm create` does, for tests.

    vm = boot_vm(build_vm())        # image cached by its inputs; ~60-90 s to a prepared host here
    vm.ssh_port, vm.key, vm.known_hosts   # host key pinned (the VM's own, installed by cloud-init)
    vm.ssh("id", user="deployer")   # root and the deploy user both log in with vm.key
    vm.close()                      # poweroff, then kill qemu if it lingers; the VM's files go

Each boot gets a NoCloud seed rendered from deploy/'s user-data (deploy user `deployer`), so the
deploy tests run against a host prepared exactly as a user's would be. `boot_vm(..., prepare=False)`
boots the bare image instead (root only, cloud-init disabled): a host for `mur host prepare`.
Images are cached in $MUR_VM_IMAGES (default $MUR_CI_CACHE/vm-images).
Run `python integration/vm/vmboot.py [6.1|6.12]` to boot one by hand (prints ssh, Ctrl-C stops).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("MUR_CI_CACHE", "/var/cache/mur-ci"))
os.environ.setdefault("MUR_VM_IMAGES", str(CACHE / "vm-images"))

from mur.provision import machines  # noqa: E402
from mur.provision.image import ImageSpec, ensure_image  # noqa: E402
from mur.provision.reporter import QUIET  # noqa: E402

DEPLOY_USER = "deployer"


def build_vm(timeout: float = 1800, kernel: str = "6.1") -> Path:
    """The image directory for `kernel` (built once, then cached)."""
    return ensure_image(ImageSpec(kernel=kernel), QUIET).dir


class VM:
    """A booted mur.provision Machine with the attributes the deploy tests use."""

    def __init__(self, machine: machines.Machine, root: Path):
        self.machine, self._root = machine, root

    @property
    def ssh_port(self) -> int:
        return self.machine.port

    @property
    def key(self) -> str:
        return str(self.machine.root_key)

    @property
    def boot_seconds(self) -> float:
        return self.machine.boot_seconds

    @property
    def serial_log(self) -> Path:
        return self.machine.serial_log

    @property
    def host_key_line(self) -> str:
        return self.machine.known_hosts.read_text().strip()

    def write_known_hosts(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.host_key_line + "\n")
        return path

    def ssh(self, command: str, user: str = "root", timeout: float = 300) -> subprocess.CompletedProcess:
        return self.machine.ssh(command, user=user, timeout=timeout, key=self.machine.root_key)

    def close(self) -> None:
        machines.stop(self.machine)
        shutil.rmtree(self._root, ignore_errors=True)


def boot_vm(image_dir: Path, memory_mb: int = 2048, cpus: int = 2, timeout: float = 900, *, prepare: bool = True,
            deploy_user: str = DEPLOY_USER) -> VM:
    """Boot a VM of this image (prepared by cloud-init unless prepare=False); raises on failure."""
    kernel = json.loads((Path(image_dir) / "image.json").read_text())["spec"]["kernel"]
    root = Path(tempfile.mkdtemp(prefix="mur-vms-"))
    root_pub = (Path(image_dir) / "id_ed25519.pub").read_text().strip()
    req = machines.CreateRequest(name="testvm", kernel=kernel, deploy_user=deploy_user, authorized_keys=(root_pub,),
                                 prepare=prepare, memory_mb=memory_mb, cpus=cpus, boot_timeout=timeout)
    try:
        return VM(machines.create(req, QUIET, root=root), root)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


if __name__ == "__main__":
    vm = boot_vm(build_vm(kernel=sys.argv[1] if len(sys.argv) > 1 else "6.1"))
    print(f"booted in {vm.boot_seconds:.1f}s; " + " ".join(vm.machine.ssh_argv(DEPLOY_USER, batch=False)))
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        vm.close()
        os._exit(0)
