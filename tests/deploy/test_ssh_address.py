"""An SSH target as people type it (`--host`, a fleet's `host:`): one reading, refused before any
connection when it is not an address, and a name the resolver says does not exist is not retried
for the whole connect budget."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from mur.deploy.targets import TargetSpec
from mur.deploy.targets.address import split_address, ssh_coordinates
from mur.errors import MurError

ACCEPTED = {
    "203.0.113.7": ("203.0.113.7", None, None),
    "vm-1.example.com": ("vm-1.example.com", None, None),
    "vm-1.example.com.": ("vm-1.example.com.", None, None),
    "deployer@vm": ("vm", "deployer", None),
    "vm:2222": ("vm", None, 2222),
    "deployer@203.0.113.7:2222": ("203.0.113.7", "deployer", 2222),
    "[2001:db8::7]:2222": ("2001:db8::7", None, 2222),
    "mur@[::1]": ("::1", "mur", None),
    "2001:db8::7": ("2001:db8::7", None, None),
    "ssh://deployer@vm:2222": ("vm", "deployer", 2222),
    "SSH://vm": ("vm", None, None),
    "ssh://[::1]:22/": ("::1", None, 22),
    "  vm  ": ("vm", None, None),
}

REFUSED = [
    "", "ssh://", "vm:", "vm:0", "vm:65536", "vm:22x", "vm: 22", "@vm", "a@b@vm", "bad user@vm",
    "-oProxyCommand=touch /tmp/x", "vm;reboot", "vm name", "300.1.1.1", "1.2.3.4.5", "[vm]:22", "[::1",
    "[::1]x", "2001:db8::zz", "https://vm", "ssh://vm/path", "ssh://u:pw@vm", "ssh://vm:99999",
    "a" * 64 + ".example", ".".join(["a" * 60] * 5),
]


@pytest.mark.parametrize("text", sorted(ACCEPTED))
def test_the_forms_of_an_address(text):
    assert split_address(text) == ACCEPTED[text]


@pytest.mark.parametrize("text", REFUSED)
def test_what_is_no_address_is_refused_saying_why(text):
    with pytest.raises(ValueError) as err:
        split_address(text)
    assert str(err.value)
    with pytest.raises(MurError) as bad:
        TargetSpec.ssh(text)
    assert bad.value.code == "E-DEPLOY-001" and "USER@HOST:PORT" in (bad.value.hint or "")


def test_user_and_port_given_twice_must_agree():
    assert ssh_coordinates("vm", None, None) == ("vm", "root", 22)
    assert ssh_coordinates("deployer@vm:2222", None, None) == ("vm", "deployer", 2222)
    assert ssh_coordinates("vm", "deployer", 2222) == ("vm", "deployer", 2222)
    assert ssh_coordinates("deployer@vm:2222", "deployer", 2222) == ("vm", "deployer", 2222)
    for user, port, what in (("root", None, "user 'deployer'"), (None, 22, "port 2222")):
        with pytest.raises(MurError) as err:
            ssh_coordinates("deployer@vm:2222", user, port)
        assert err.value.code == "E-DEPLOY-001" and what in err.value.message


def test_a_target_spec_keeps_the_parts_not_the_text():
    spec = TargetSpec.ssh("deployer@[2001:db8::7]:2222", key_file="/k")
    assert (spec.host, spec.user, spec.port, spec.key_file) == ("2001:db8::7", "deployer", 2222, "/k")
    assert spec.same_place(TargetSpec.ssh("2001:db8::7", "deployer", 2222))


@pytest.mark.parametrize("argv", [
    ["deploy", "--host", "ssh://nobody@127.0.0.1:1x"],
    ["deploy", "--host", "deployer@127.0.0.1", "--ssh-user", "root"],
    ["deploy", "gc", "--host", "127.0.0.1:22", "--ssh-port", "2222"],
    ["host", "prepare", "--host", "-oProxyCommand=x"],
])
def test_every_command_that_takes_a_host_refuses_a_bad_one_before_connecting(tmp_path, argv):
    (tmp_path / "murmur.yaml").write_text("name: x\nversion: 0.1.0\n")
    proc = subprocess.run([sys.executable, "-m", "mur", *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error[E-DEPLOY-001]: --host "), proc.stderr
    assert "Traceback" not in proc.stderr and "connect" not in proc.stderr.split("\n")[0]


def test_a_fleet_host_is_read_the_same_way(tmp_path):
    from mur.fleet.config import read as load_fleet
    from mur.fleet.plan import resolve, select

    fleet_file = tmp_path / "deploy.yaml"
    fleet_file.write_text(textwrap.dedent("""\
        manifest: murmur.yaml
        targets:
          web-1: {host: "deployer@203.0.113.7:2222"}
          web-2: {host: "203.0.113.8", user: deployer}
    """))
    (tmp_path / "murmur.yaml").write_text("name: x\nversion: 0.1.0\n")
    fleet = load_fleet(fleet_file)
    plan = resolve(fleet, fleet_file, capsule="x")
    specs = {t.name: t.spec for t in plan.targets}
    assert (specs["web-1"].host, specs["web-1"].user, specs["web-1"].port) == ("203.0.113.7", "deployer", 2222)
    assert (specs["web-2"].host, specs["web-2"].user, specs["web-2"].port) == ("203.0.113.8", "deployer", 22)
    assert select(fleet, [], "203.0.113.7") == ["web-1"]  # --host names the machine; its user and port may be left out
    assert select(fleet, [], "deployer@203.0.113.7:2222") == ["web-1"]
    with pytest.raises(MurError):
        select(fleet, [], "203.0.113.7:22")

    fleet_file.write_text("manifest: murmur.yaml\ntargets:\n  web-1: {host: 'vm;reboot'}\n")
    with pytest.raises(MurError) as err:
        load_fleet(fleet_file)
    assert err.value.code == "E-FLEET-001" and "vm;reboot" in err.value.message

    fleet_file.write_text("manifest: murmur.yaml\ndefaults: {port: 22}\ntargets:\n  web-1: {host: 'vm:2222'}\n")
    with pytest.raises(MurError) as err:
        resolve(load_fleet(fleet_file), fleet_file, capsule="x")
    assert err.value.code == "E-FLEET-001" and "port 2222" in err.value.message


class _Refusing:
    """A paramiko client stand-in whose connect fails as the resolver does (no network in tests)."""

    tries = 0

    def __init__(self, error: OSError):
        self.error = error

    def load_host_keys(self, path):
        pass

    def set_missing_host_key_policy(self, policy):
        pass

    def connect(self, *a, **k):
        type(self).tries += 1
        raise self.error

    def close(self):
        pass


def test_a_name_that_does_not_exist_fails_at_once_and_a_resolver_hiccup_is_retried(tmp_path):
    from mur.deploy.targets.ssh import SSHTarget

    cases = ((socket.EAI_NONAME, "Name or service not known", 1), (socket.EAI_AGAIN, "Temporary failure", 2))
    for errno, text, tries in cases:
        _Refusing.tries = 0
        with pytest.raises(MurError) as err:
            SSHTarget("vm.example", known_hosts=str(tmp_path / "kh"), connect_budget=1.5,
                      client_factory=lambda: _Refusing(socket.gaierror(errno, text)))
        assert err.value.code == "E-DEPLOY-003"
        assert _Refusing.tries == tries, (text, _Refusing.tries)
        if tries == 1:
            assert err.value.message == "vm.example does not resolve: Name or service not known"
