"""`mur vm create --kernel 6.12` (the real CLI, a Debian 12 VM under qemu TCG): the newer kernel's
Landlock ABI, a deploy, the escape suite; `mur vm ls` and `destroy`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy_support import mur, mur_json
from vm_deploy import matrix_row, shell_deploy_answers
from vm_suite import expected_failures, run_escape_suite
from vmboot import DEPLOY_USER

pytestmark = [pytest.mark.requires_qemu, pytest.mark.requires_root, pytest.mark.slow]
# Each VM is its module's fixture, so it is shut down once its tests ran: an idle TCG guest still
# takes about half a CPU from the tests after it (the three were one module once).


@pytest.fixture(scope="module")
def vm612(vm_ready, tmp_path_factory):
    home = tmp_path_factory.mktemp("vm-home")
    env = {"MUR_VM_DIR": str(tmp_path_factory.mktemp("vm-dir"))}
    res = mur("vm", "create", "--name", "k612", "--kernel", "6.12", "--deploy-user", DEPLOY_USER, "--json",
              home=home, env=env, timeout=2400)
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert "boot k612" in res.stderr and "cloud-init" in res.stderr  # progress while it boots
    from mur.provision import machines

    m = machines.get("k612", Path(env["MUR_VM_DIR"]))
    yield m, info, home, env
    mur("vm", "destroy", "k612", home=home, env=env, check=False, timeout=300)


def test_vm_create_boots_the_chosen_kernel(vm612):
    m, info, home, env = vm612
    assert info["kernel"] == "6.12" and info["extra"]["kernel_release"].startswith("6.12.")
    assert info["landlock_abi"] == 6 and info["running"]
    assert info["deploy_command"].startswith("mur deploy --host 127.0.0.1 --ssh-port")
    assert m.ssh("uname -r").stdout.startswith("6.12.")
    ls = mur_json("vm", "ls", home=home, env=env)
    assert [(v["name"], v["running"]) for v in ls] == [("k612", True)]


def test_deploy_and_escape_suite_on_kernel_6_12(vm612, runtime_bundle, shell_capsule, tmp_path):
    m, _, _, _ = vm612
    home = tmp_path / "deploy-home"
    home.mkdir()
    report = shell_deploy_answers(m, home, shell_capsule, DEPLOY_USER)
    assert report["probe"]["landlock_abi"] >= 6
    suite = run_escape_suite(m)
    matrix_row("6.12", m, suite, True)
    assert suite["abi"] >= 6 and expected_failures(suite["abi"]) == []
    assert suite["failed_names"] == [] and suite["passed"] + len(suite["flaky"]) >= 52, suite["tail"]


def test_vm_ssh_and_destroy(vm612):
    m, _, home, env = vm612
    out = mur("vm", "ssh", "k612", "--", "id", "-un", home=home, env=env, timeout=120).stdout
    assert out.strip() == DEPLOY_USER
    mur("vm", "destroy", "k612", home=home, env=env, timeout=300)
    assert not m.dir.exists() and not m.running()
    res = mur("vm", "ssh", "k612", home=home, env=env, check=False)
    assert res.returncode == 1 and "error[E-VM-002]: no VM named k612" in res.stderr
