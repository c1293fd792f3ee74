"""`mur host prepare` against an sshd container (Debian 12, no systemd): the state is read over
real SSH, as root and as a sudo user, and a host without systemd is refused before any change."""

from __future__ import annotations

import pytest

from deploy_support import mur

pytestmark = [pytest.mark.requires_docker]


def _args(vm, home, user):
    kh = vm.known_hosts(home / "known_hosts")
    return ["host", "prepare", "--host", "127.0.0.1", "--ssh-port", str(vm.port), "--ssh-user", user,
            "--ssh-key", str(vm.key), "--known-hosts", str(kh)]


@pytest.mark.parametrize("user", ["root", "deployer"])
def test_a_host_without_systemd_is_refused_and_left_alone(sshd_vm, home, user):
    before = sshd_vm.sh("ls -la /etc/sudoers.d /etc/systemd/system 2>&1; getent group mur-deploy; true")[1]
    res = mur(*_args(sshd_vm, home, user), "--check", home=home, check=False, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "error[E-PROV-001]: 127.0.0.1: systemd is not running" in res.stderr and "Traceback" not in res.stderr
    res = mur(*_args(sshd_vm, home, user), home=home, check=False, timeout=300)
    assert res.returncode == 1 and "E-PROV-001" in res.stderr
    assert sshd_vm.sh("ls -la /etc/sudoers.d /etc/systemd/system 2>&1; getent group mur-deploy; true")[1] == before


def test_an_unknown_host_key_is_refused(sshd_vm, home):
    args = _args(sshd_vm, home, "root")
    args[args.index("--known-hosts") + 1] = str(home / "empty_known_hosts")
    res = mur(*args, "--check", home=home, check=False, timeout=300)
    assert res.returncode == 1 and "error[E-DEPLOY-009]" in res.stderr, res.stderr


def test_a_user_without_sudo_is_told_so(sshd_vm, home):
    sshd_vm.sh("rm -f /etc/sudoers.d/deployer")
    res = mur(*_args(sshd_vm, home, "deployer"), "--check", home=home, check=False, timeout=300)
    assert res.returncode == 1 and "error[E-PROV-002]" in res.stderr and "passwordless sudo" in res.stderr
