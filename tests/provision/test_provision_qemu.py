"""The qemu command line, the accelerator choice, the VM records and the CLI's errors (no VM boots)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mur.errors import MurError
from mur.provision import machines, qemu
from mur.provision.image import KERNELS, ImageSpec

ROOT = Path(__file__).resolve().parents[2]


def test_the_guest_gets_only_a_loopback_ssh_forward(tmp_path):
    cmd = qemu.command(vmlinuz=tmp_path / "k", initrd=tmp_path / "i", disk=tmp_path / "d.qcow2", port=40001,
                       serial=tmp_path / "s.log", seed=tmp_path / "seed.iso")
    netdevs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-netdev"]
    assert netdevs == ["user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:40001-:22"]
    assert cmd[cmd.index("-accel") + 1] == "tcg" and cmd[cmd.index("-cpu") + 1] == "max"
    assert "-monitor" in cmd and cmd[cmd.index("-monitor") + 1] == "none"
    assert f"file={tmp_path / 'seed.iso'},format=raw,if=virtio,readonly=on" in cmd
    assert "cloud-init=disabled" in qemu.command(vmlinuz=tmp_path / "k", initrd=tmp_path / "i", disk=tmp_path / "d",
                                                  port=1, serial=tmp_path / "s", append="cloud-init=disabled")[
        cmd.index("-append") + 1]


def test_accelerator_choice(monkeypatch):
    monkeypatch.setenv("MUR_VM_ACCEL", "tcg")
    assert qemu.choose_accel("auto") == "tcg"
    assert qemu.choose_accel("kvm") == "kvm"
    with pytest.raises(MurError):
        qemu.choose_accel("hvf")
    monkeypatch.delenv("MUR_VM_ACCEL")
    flags = Path("/proc/cpuinfo").read_text()
    if " vmx" not in flags and " svm" not in flags:  # this machine: /dev/kvm without hardware virtualization
        assert qemu.choose_accel("auto") == "tcg"


def test_image_keys_follow_their_inputs():
    a, b = ImageSpec(kernel="6.1"), ImageSpec(kernel="6.12")
    assert a.key() != b.key() and a.base_key() == b.base_key() and a.key() == ImageSpec(kernel="6.1").key()
    assert KERNELS["6.1"][1] == 2 and KERNELS["6.12"][1] == 6
    with pytest.raises(MurError) as e:
        ImageSpec(kernel="5.10").validate()
    assert e.value.code == "E-VM-001"


def test_a_seed_iso_is_made_with_the_cidata_label(tmp_path):
    if not any(os.path.exists(f"/usr/bin/{t}") for t in qemu.ISO_TOOLS):
        pytest.skip("needs genisoimage")
    iso = qemu.seed_iso(tmp_path / "seed.iso", "#cloud-config\n", "instance-id: x\n")
    data = iso.read_bytes()
    assert data[0x8001:0x8006] == b"CD001" and b"cidata" in data[0x8028:0x8048]
    assert (iso.stat().st_mode & 0o777) == 0o600


def _mur(*args, env=None):
    return subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_vm_commands_on_unknown_vms(tmp_path):
    env = {"MUR_VM_DIR": str(tmp_path)}
    res = _mur("vm", "ssh", "nope", env=env)
    assert res.returncode == 1 and res.stderr.startswith("error[E-VM-002]: no VM named nope")
    assert "Traceback" not in res.stderr
    assert _mur("vm", "destroy", "Bad_Name", env=env).returncode == 1
    assert json.loads(_mur("vm", "ls", "--json", env=env).stdout) == []


def test_usage_errors_exit_2():
    assert _mur("host", "prepare", "--host", "h", "--kernel", "5.10").returncode == 2
    assert _mur("vm", "create", "--kernel", "4.19").returncode == 2
    assert _mur("host", "prepare").returncode == 2


def test_a_dead_vm_is_listed_as_stopped(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    m = machines.Machine("old", d, 40002, 2 ** 22 + 7, "6.1", "mur", "tcg", "k", 2)
    machines._save(m)
    (got,) = machines.list_machines(tmp_path)
    assert got.name == "old" and not got.running()
    assert got.deploy_command().startswith("mur deploy --host 127.0.0.1 --ssh-port 40002 --ssh-user mur")


def test_the_wheel_carries_deploy_files(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                           str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import zipfile

    (whl,) = tmp_path.glob("mur-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    for rel in ("cloud-init/user-data.yaml.tftpl", "sudoers/mur-deploy", "systemd/mur-delegate.conf",
                "host/mur-host.sh", "host/mur-cmdline.cfg", "host/mur-deploy-helper", "preflight/murmur.yaml",
                "vm/99-mur-vm.cfg"):
        assert f"mur/provision/deploy/{rel}" in names
