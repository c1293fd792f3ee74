"""The prepared host's sudoers rule and root helper, for real: sudo (Debian 12's) with the rule from
deploy/sudoers, the helper from deploy/host, a member of mur-deploy on the far side of it.

The sshd container has no systemd (none runs in a container here), so `systemctl`/`journalctl`
are a recorder at /usr/bin that logs its argv: what is under test is what sudo lets through and
what the helper installs and refuses; integration/provision's VM tests deploy through the same
helper under a real systemd."""

from __future__ import annotations

import base64
import shlex

import pytest

from mur.deploy.init.systemd import render_unit
from mur.deploy.steps import Layout, ServiceConfig
from mur.deploy.targets.base import HELPER
from mur.provision import assets

pytestmark = [pytest.mark.requires_docker]

DEP = "dep_" + "c" * 32
HOME = "/home/deployer"
RECORDER = "#!/bin/sh\necho \"$(basename \"$0\") $*\" >> /tmp/systemd.log\n" \
           "case \"$*\" in *InvocationID*) echo inv1;; show*) echo ActiveState=active; echo MainPID=42;; esac\n"


def _write(vm, path: str, data: bytes, mode: str, owner: str = "root") -> None:
    b64 = base64.b64encode(data).decode()
    rc, out = vm.sh(f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && echo {b64} | base64 -d > {shlex.quote(path)} "
                    f"&& chmod {mode} {shlex.quote(path)} && chown {owner} {shlex.quote(path)}")
    assert rc == 0, out


def _as_deployer(vm, cmd: str) -> tuple[int, str]:
    return vm.sh(f"su -s /bin/sh deployer -c {shlex.quote(cmd + ' 2>&1')}")


@pytest.fixture
def prepared(sshd_vm):
    """The container as `mur host prepare` leaves a host: the group, the rule, the helper, and no
    other sudo for deployer."""
    rc, out = sshd_vm.sh("rm -f /etc/sudoers.d/deployer && groupadd -f mur-deploy && usermod -aG mur-deploy deployer")
    assert rc == 0, out
    _write(sshd_vm, assets.SUDOERS.dest, assets.SUDOERS.data(), "0440")
    helper = next(f for f in assets.HOST_FILES if f.dest == HELPER)
    _write(sshd_vm, helper.dest, helper.data(), "0755")
    assert sshd_vm.sh(f"visudo -cf {assets.SUDOERS.dest}")[0] == 0
    for tool in ("systemctl", "journalctl"):
        _write(sshd_vm, f"/usr/bin/{tool}", RECORDER.encode(), "0755")
    return sshd_vm


def _unit(user: str = "deployer", dep: str = DEP) -> bytes:
    svc = ServiceConfig(port=8123, init="systemd", user=user, env=(("A", "b c"),))
    return render_unit(Layout(HOME, dep), svc, "hello").encode()


def _place(vm, text: bytes, dep: str = DEP) -> None:
    _write(vm, f"{HOME}/.murmur/deployments/{dep}/current/mur-{dep}.service", text, "0644", "deployer:deployer")


def test_the_rule_allows_the_helper_and_no_shell(prepared):
    rc, out = _as_deployer(prepared, "sudo -n sh -c id")
    assert rc != 0 and "uid=0" not in out
    for cmd in ("sudo -n /bin/cat /etc/shadow", "sudo -n env id", "sudo -n -u root /bin/sh"):
        assert _as_deployer(prepared, cmd)[0] != 0, cmd
    assert _as_deployer(prepared, "sudo -n true")[0] == 0
    rc, out = _as_deployer(prepared, f"sudo -n {HELPER} check")
    assert rc == 0 and out.strip() == "mur-deploy-helper 1"


def test_a_unit_mur_renders_is_installed_started_read_and_removed(prepared):
    _place(prepared, _unit())
    for sub in ("install-unit", "start", "restart", "status", "logs", "stop", "remove"):
        args = f"{sub} {DEP}" + (" 20" if sub == "logs" else "")
        rc, out = _as_deployer(prepared, f"sudo -n {HELPER} {args}")
        assert rc == 0, (sub, out)
        if sub == "install-unit":
            rc, stat = prepared.sh(f"stat -c '%U %a' /etc/systemd/system/mur-{DEP}.service && "
                                   f"cmp /etc/systemd/system/mur-{DEP}.service "
                                   f"{HOME}/.murmur/deployments/{DEP}/current/mur-{DEP}.service")
            assert rc == 0 and stat.split()[:2] == ["root", "644"], stat
        if sub == "status":
            assert "ActiveState=active" in out
    log = prepared.sh("cat /tmp/systemd.log")[1].splitlines()
    unit = f"mur-{DEP}.service"
    assert log[0] == "systemctl daemon-reload"
    assert f"systemctl enable --quiet {unit}" in log and f"systemctl start {unit}" in log
    assert f"systemctl restart {unit}" in log and f"systemctl stop {unit}" in log
    assert f"journalctl -u {unit} --no-pager -o cat -n 20" in log
    assert prepared.sh(f"test -e /etc/systemd/system/{unit}")[0] != 0  # removed


REFUSED = {  # one container for all: each is a unit text a deploy user might hand the helper
    "user-root": lambda u: u.replace(b"User=deployer", b"User=root"),
    "no-user": lambda u: u.replace(b"User=deployer\n", b""),
    "exec-plus": lambda u: u.replace(b"ExecStart=/", b"ExecStart=+/"),
    "exec-bang": lambda u: u.replace(b"ExecStartPre=/", b"ExecStartPre=!/"),
    "extra-exec": lambda u: u.replace(b"[Install]", b"ExecStartPost=/bin/sh -c id\n[Install]"),
    "capabilities": lambda u: u.replace(b"KillMode=mixed", b"AmbientCapabilities=CAP_SYS_ADMIN"),
    "continuation": lambda u: u.replace(b"Type=simple", b"Type=simple\nUser=deployer\\\n"),
    "empty": lambda u: b"",
}


def test_a_unit_that_would_run_anything_as_root_is_refused(prepared):
    for name, change in REFUSED.items():
        _place(prepared, change(_unit()))
        rc, out = _as_deployer(prepared, f"sudo -n {HELPER} install-unit {DEP}")
        assert rc != 0 and "refused" in out, (name, out)
        assert prepared.sh(f"ls -a /etc/systemd/system/ | grep -c mur-{DEP}")[1].strip() == "0", name  # no leftovers


def test_paths_and_arguments_a_user_controls_are_not_followed(prepared):
    # a symlink in place of the unit is read with the user's rights: root's files stay unread
    rc, out = prepared.sh(f"mkdir -p {HOME}/.murmur/deployments/{DEP}/current && "
                          f"ln -sf /etc/shadow {HOME}/.murmur/deployments/{DEP}/current/mur-{DEP}.service && "
                          f"chown -R deployer:deployer {HOME}/.murmur")
    assert rc == 0, out
    rc, out = _as_deployer(prepared, f"sudo -n {HELPER} install-unit {DEP}")
    assert rc != 0 and "cannot read" in out and "root:" not in out, out
    for bad in ("install-unit dep_../../etc", f"start {DEP}x", "logs " + DEP + " '5;id'", f"logs {DEP} 5 now",
                "shell " + DEP, "start", f"start dep_{'C' * 32}"):
        rc, out = _as_deployer(prepared, f"sudo -n {HELPER} {bad}")
        assert rc == 2 and "mur-deploy-helper:" in out, (bad, out)
    # another deploy user's unit is not this one's to stop
    other = "dep_" + "d" * 32
    _write(prepared, f"/etc/systemd/system/mur-{other}.service", _unit(user="alice", dep=other), "0644")
    rc, out = _as_deployer(prepared, f"sudo -n {HELPER} stop {other}")
    assert rc == 2 and "does not run as deployer" in out, out
