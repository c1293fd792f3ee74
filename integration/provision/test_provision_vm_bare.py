"""`mur vm create --bare` (the real CLI, a Debian 12 VM under qemu TCG), brought there by the `mur
host prepare` line it prints, run as printed; a second run changes nothing; a pending reboot is made
and waited for; a distribution it does not support is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_support import mur
from vm_deploy import deploy_args

pytestmark = [pytest.mark.requires_qemu, pytest.mark.requires_root, pytest.mark.slow]
# Each VM is its module's fixture, so it is shut down once its tests ran: an idle TCG guest still
# takes about half a CPU from the tests after it (the three were one module once).


PRINTED_USER = "mur"  # what the printed `mur host prepare` line makes (its default --deploy-user)


class _Bare:
    def __init__(self, machine, printed: str):
        self.machine, self.printed = machine, printed

    def ssh(self, command: str, user: str = "root", timeout: float = 300):
        return self.machine.ssh(command, user=user, timeout=timeout, key=self.machine.root_key)


@pytest.fixture(scope="module")
def bare_vm(vm_ready, tmp_path_factory):
    from mur.provision import machines

    home = tmp_path_factory.mktemp("bare-home")
    env = {"MUR_VM_DIR": str(tmp_path_factory.mktemp("bare-vms"))}
    res = mur("vm", "create", "--name", "bare", "--kernel", "6.1", "--bare", home=home, env=env, timeout=2400)
    printed = next(line.split("prepare", 1)[1].strip() for line in res.stdout.splitlines()
                   if line.strip().startswith("prepare "))
    yield _Bare(machines.get("bare", Path(env["MUR_VM_DIR"])), printed)
    mur("vm", "destroy", "bare", home=home, env=env, check=False, timeout=300)


def test_the_printed_prepare_line_works_as_printed_then_changes_nothing(bare_vm, home, runtime_bundle):
    m = bare_vm.machine
    assert bare_vm.ssh(f"id {PRINTED_USER}").returncode != 0  # really unprepared
    assert bare_vm.printed.startswith("mur host prepare --host 127.0.0.1")
    # the line exactly as `mur vm create --bare` printed it, through a shell; HOME has no ~/.ssh keys
    run = subprocess.run(["bash", "-c", bare_vm.printed.replace("mur ", f"{sys.executable} -m mur ", 1)],
                         env={**os.environ, "HOME": str(home)}, capture_output=True, text=True, timeout=2400)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-2000:]
    assert "preflight  ok as mur" in run.stdout, run.stdout  # its final check logs in as the new user
    args = [*bare_vm.printed.split()[1:], "--json"]
    again = json.loads(mur(*args, home=home, timeout=2400).stdout.strip().splitlines()[-1])
    assert not again["changed"] and again["changes"] == [] and again["applied"] == [], again
    assert again["preflight"]["ok"] and again["preflight"]["user"] == PRINTED_USER
    assert {c["name"]: c["ok"] for c in again["preflight"]["checks"]}["shell limits"]
    assert again["deploy_command"].startswith(f"mur deploy --host 127.0.0.1 --ssh-user {PRINTED_USER} --ssh-port")
    # the prepared host is in the cloud-init host's state: same files, same sudo
    r = bare_vm.ssh("sudo -n true && echo sudo-ok; cat /etc/mur/host.json", user=PRINTED_USER)
    assert "sudo-ok" in r.stdout and f'"deploy_user":"{PRINTED_USER}"' in r.stdout


def test_a_pending_reboot_is_made_and_waited_for(bare_vm, home):
    """A kernel change leaves /run/mur-reboot-required (mur-host.sh apply); prepare reboots the host,
    waits for SSH with a new boot id, and checks again (/run is empty after the boot)."""
    m = bare_vm.machine
    before = bare_vm.ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert bare_vm.ssh("touch /run/mur-reboot-required").returncode == 0
    args = [*bare_vm.printed.split()[1:], "--json"]
    res = mur(*args, "--no-preflight", home=home, timeout=1200)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["applied"] == ["reboot"] and out["rebooted"] and out["reboot"], out
    assert "reboot 127.0.0.1 and wait for it" in res.stderr
    after = bare_vm.ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert after and after != before
    assert mur(*args, "--check", home=home, check=False, timeout=600).returncode == 0


def test_an_unsupported_distribution_is_refused(bare_vm, home):
    m = bare_vm.machine
    assert bare_vm.ssh("cp /etc/os-release /root/os-release.keep && sed -i 's/^ID=.*/ID=ubuntu/; "
                       "s/^VERSION_ID=.*/VERSION_ID=\"24.04\"/' /usr/lib/os-release").returncode == 0
    try:
        res = mur("host", "prepare", *deploy_args(m, "root"), "--authorized-key", str(Path(str(m.root_key) + ".pub")),
                  "--check", home=home, check=False, timeout=600)
        assert res.returncode == 1
        assert "error[E-PROV-001]" in res.stderr and "unsupported distribution ubuntu 24.04" in res.stderr
        assert "Traceback" not in res.stderr
    finally:
        bare_vm.ssh("cp /root/os-release.keep /usr/lib/os-release")
