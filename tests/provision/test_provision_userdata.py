"""The rendered user-data: structure, refusal of injected input, cloud-init's own schema check, and
byte-equality with what terraform/modules/mur-host renders (the same template, two renderers)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from mur import __version__
from mur.errors import MurError
from mur.provision import assets
from mur.provision.userdata import UserDataInputs, render, tf_json
from tf_render import MODULE, terraform_user_data, tf as _tf

ROOT = Path(__file__).resolve().parents[2]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3RrZXl0ZXN0a2V5dGVzdGtleXRlc3RrZXkx ci@mur"
HOST_PUB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhvc3RrZXlob3N0a2V5aG9zdGtleWhvc3RrZXkx"
HOST_PRIV = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def _doc(**kw) -> dict:
    return yaml.safe_load(render(UserDataInputs(ssh_authorized_keys=(KEY,), **kw)))


def test_the_deploy_host_is_described_by_deploy_files():
    doc = _doc(deploy_user="deployer")
    assert doc["users"] == [{"name": "deployer", "groups": "mur-deploy", "shell": "/bin/bash", "lock_passwd": True,
                             "ssh_authorized_keys": [KEY]}]
    files = {f["path"]: (f["content"], f["permissions"]) for f in doc["write_files"]}
    for hf in assets.HOST_FILES:
        assert files[hf.dest] == (hf.data().decode(), f"0{hf.mode:o}")
    assert "Delegate=memory pids cpu io" in files["/etc/systemd/system/mur-.service.d/mur-delegate.conf"][0]
    assert json.loads(files[assets.MARKER][0]) == {"deploy_user": "deployer", "kernel": "keep", "mur_version": __version__}
    assert doc["runcmd"][1] == ["sh", "/usr/local/lib/mur/mur-host.sh", "fix", "--kernel", "keep"]
    assert doc["power_state"]["condition"] == "test -f /run/mur-reboot-required"
    assert "ssh_keys" not in doc


def test_a_given_host_key_is_installed():
    doc = _doc(ssh_host_key_public=HOST_PUB, ssh_host_key_private=HOST_PRIV, kernel="6.12")
    assert doc["ssh_keys"] == {"ed25519_public": HOST_PUB, "ed25519_private": HOST_PRIV}
    assert doc["runcmd"][1][-1] == "6.12"


@pytest.mark.parametrize("field,value", [
    ("deploy_user", "x\n  sudo: ALL"), ("deploy_user", "root"), ("deploy_user", "Bad"),
    ("kernel", "5.10"), ("ssh_host_key_public", "ssh-rsa AAAA"),
])
def test_bad_inputs_are_refused(field, value):
    with pytest.raises(MurError) as e:
        render(UserDataInputs(ssh_authorized_keys=(KEY,), **{field: value}))
    assert e.value.code == "E-DEPLOY-001"


@pytest.mark.parametrize("key", ["ssh-ed25519 AAAA x\nruncmd: [reboot]", "", "not a key"])
def test_keys_that_are_not_one_line_are_refused(key):
    with pytest.raises(MurError):
        render(UserDataInputs(ssh_authorized_keys=(key,)))


def test_values_cannot_break_out_of_their_json_string():
    # a key comment may hold anything the YAML parser would otherwise act on
    inp = UserDataInputs(ssh_authorized_keys=(KEY.replace("ci@mur", 'x"] <&> #: [y'),))
    doc = yaml.safe_load(render(inp))
    assert doc["users"][0]["ssh_authorized_keys"] == [KEY.replace("ci@mur", 'x"] <&> #: [y')]
    assert len(doc["runcmd"]) == 2


def test_tf_json_matches_terraform_escaping():
    assert tf_json("<a & b>") == '"\\u003ca \\u0026 b\\u003e"'
    assert tf_json({"b": 1, "a": ["x"]}) == '{"a":["x"],"b":1}'


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="needs Debian's cloud-init package (cloud-init schema)")
@pytest.mark.parametrize("kw", [{}, {"ssh_host_key_public": HOST_PUB, "ssh_host_key_private": HOST_PRIV, "kernel": "6.1"}])
def test_cloud_init_accepts_the_user_data(tmp_path, kw):
    f = tmp_path / "user-data"
    f.write_text(render(UserDataInputs(ssh_authorized_keys=(KEY,), **kw)))
    proc = subprocess.run(["cloud-init", "schema", "--config-file", str(f)], capture_output=True, text=True)
    assert proc.returncode == 0 and "Valid cloud-config" in proc.stdout, proc.stdout + proc.stderr


def test_cloud_init_schema_would_catch_a_broken_template(tmp_path):
    if shutil.which("cloud-init") is None:
        pytest.skip("needs Debian's cloud-init package")
    f = tmp_path / "user-data"
    f.write_text(render(UserDataInputs(ssh_authorized_keys=(KEY,))).replace("lock_passwd: true", "lock_passwd: maybe"))
    assert subprocess.run(["cloud-init", "schema", "--config-file", str(f)], capture_output=True).returncode != 0


# --- terraform (offline: the module is provider-free) -------------------------------------------

needs_terraform = pytest.mark.skipif(shutil.which("terraform") is None,
                                     reason="terraform is not on PATH (no Debian/PyPI/npm package carries it)")


@needs_terraform
def test_terraform_fmt_init_validate_and_test_offline(tmp_path):
    assert _tf(["fmt", "-check", "-recursive", str(ROOT / "terraform")], ROOT, tmp_path).returncode == 0
    for cmd in (["init", "-backend=false", "-input=false"], ["validate"], ["test"]):
        proc = _tf(cmd, MODULE, tmp_path / "data")
        assert proc.returncode == 0, f"terraform {cmd[0]}:\n{proc.stdout}{proc.stderr}"
    assert "7 passed, 0 failed" in proc.stdout, proc.stdout


@needs_terraform
@pytest.mark.parametrize("kw", [
    {"deploy_user": "deployer"},
    {"deploy_user": "ops", "kernel": "6.12", "ssh_host_key_public": HOST_PUB, "ssh_host_key_private": HOST_PRIV},
])
def test_terraform_and_mur_render_the_same_bytes(tmp_path, kw):
    tf = terraform_user_data(tmp_path, ssh_authorized_keys=[KEY], mur_version=__version__, **kw)
    assert tf == render(UserDataInputs(ssh_authorized_keys=(KEY,), **kw))


@needs_terraform
def test_the_module_default_mur_version_is_this_mur():
    text = (MODULE / "variables.tf").read_text()
    assert f'default     = "{__version__}"' in text
