"""`mur vm` without booting: the console made plain text, the bare VM's prepare line, the host key a
given user-data pins, and the CLI's checks of --user-data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mur.errors import MurError
from mur.provision import console, machines, qemu
from mur.provision.userdata import UserDataInputs, render

ROOT = Path(__file__).resolve().parents[2]
HOST_PUB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH2v5l4l3xWQ6m0Y4bJq0mJqO3cZ1vQm6J0l7lq3k9Zf host"
CLIENT_PUB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ3k9Zfq3lq7l0J6mQv1Zc3Oq0mJqb4Y0m6QWx3l4l5v client"

# What a Debian guest writes to its serial console: a terminal reset, clear screen and cursor home,
# colours, a title (OSC), a charset switch, a progress line redrawn with carriage returns.
RAW = ("\x1bc\x1b[2J\x1b[H[    0.000000] Linux version 6.1.0\r\n"
       "\x1b]0;murvm\x07\x1b(B[  \x1b[0;32mOK  \x1b[0m] Started ssh.service\r\n"
       "fsck 10%\rfsck 55%\rfsck 100%\r\n"
       "\x1b[?25lbell\x07 and \x9b31mC1\x9bm backspace\x08 \x1b[1;31merror\x1b[0m\r\n")


def test_console_output_becomes_plain_text():
    text = console.plain(RAW)
    assert text.splitlines() == ["[    0.000000] Linux version 6.1.0", "[  OK  ] Started ssh.service", "fsck 100%",
                                 "bell and C1 backspace error"]
    assert not any(ch in text for ch in "\x1b\x07\x08\r\x9b")
    assert console.tail(RAW, lines=1) == "bell and C1 backspace error"
    assert console.tail(RAW, chars=6) == "error\n"


def test_the_waiting_note_and_error_tail_are_plain(tmp_path):
    m = machines.Machine("v1", tmp_path, 2222, 0, "6.1", "", "tcg", "k", 2)
    m.serial_log.write_text(RAW + "\x1bc\x1b[2Jlogin: \x1b[K")
    assert machines._serial_tail(m) == "login:"


def test_a_bare_vms_prepare_line_authorizes_the_key_it_logs_in_with(tmp_path):
    image_key = tmp_path / "images" / "id_ed25519"
    m = machines.Machine("bare", tmp_path / "bare", 40022, 0, "6.1", "", "tcg", "k", 2,
                         extra={"root_key": str(image_key)})
    line = m.prepare_command()
    assert line == (f"mur host prepare --host 127.0.0.1 --ssh-port 40022 --ssh-user root --ssh-key {image_key} "
                    f"--known-hosts {tmp_path / 'bare' / 'known_hosts'} --authorized-key {image_key}.pub")
    assert m.to_dict()["prepare_command"] == line
    prepared = machines.Machine("prep", tmp_path / "prep", 40023, 0, "6.1", "mur", "tcg", "k", 2)
    assert prepared.prepare_command() is None


def test_the_pinned_host_key_of_a_given_user_data():
    ours = render(UserDataInputs(ssh_authorized_keys=(CLIENT_PUB,), ssh_host_key_public=HOST_PUB,
                                 ssh_host_key_private="-----BEGIN OPENSSH PRIVATE KEY-----\nx\n"))
    assert machines.user_data_host_key(ours) == HOST_PUB  # the terraform module's, with host key variables
    assert machines.user_data_host_key(render(UserDataInputs(ssh_authorized_keys=(CLIENT_PUB,)))) is None
    assert machines.user_data_host_key("#!/bin/sh\necho hi\n") is None
    with pytest.raises(MurError) as err:
        machines.user_data_host_key("#cloud-config\nusers: [\n")
    assert err.value.code == "E-VM-002"


def test_a_login_key_of_a_user_data_vm_is_its_deploy_key(tmp_path):
    m = machines.Machine("own", tmp_path, 1, 0, "6.1", "deployer", "tcg", "k", 2,
                         extra={"login_key": "/keys/deploy", "root_key": "/images/id_ed25519"})
    assert m.key == Path("/keys/deploy") and m.deploy_args()[-4:] == ["--ssh-key", "/keys/deploy", "--known-hosts",
                                                                      str(tmp_path / "known_hosts")]
    assert m.ssh_argv("root")[m.ssh_argv("root").index("-i") + 1] == "/images/id_ed25519"


def test_the_seed_carries_vendor_data_beside_the_user_data(tmp_path):
    if not any(os.path.exists(f"/usr/bin/{t}") for t in qemu.ISO_TOOLS):
        pytest.skip("needs genisoimage")
    iso = qemu.seed_iso(tmp_path / "seed.iso", "#cloud-config\n{}\n", "instance-id: x\n",
                        vendor_data="#cloud-config\n{\"ssh_keys\":{}}\n").read_bytes()
    for name in (b"USER-DATA", b"META-DATA", b"VENDOR-DATA"):  # the ISO 9660 names (Rock Ridge keeps the case)
        assert name in iso.upper()
    assert b'{"ssh_keys":{}}' in iso


def _mur(*args, env=None):
    return subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_user_data_options_are_checked_before_anything_boots(tmp_path):
    env = {"MUR_VM_DIR": str(tmp_path / "vms")}
    ud = tmp_path / "ud.yaml"
    ud.write_text("#cloud-config\n{}\n")
    assert _mur("vm", "create", "--user-data", str(ud), "--bare", env=env).returncode == 2
    assert _mur("vm", "create", "--ssh-key", str(ud), env=env).returncode == 2
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    res = _mur("vm", "create", "--user-data", str(junk), env=env)
    assert res.returncode == 1 and res.stderr.startswith(f"error[E-VM-002]: {junk} is not cloud-init user-data")
    res = _mur("vm", "create", "--user-data", str(tmp_path / "absent.yaml"), env=env)
    assert res.returncode == 1 and res.stderr.startswith("error[E-IO-001]: cannot read the user-data")
    assert not (tmp_path / "vms").exists()
