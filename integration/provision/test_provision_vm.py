"""Provisioning proven on real VMs (Debian 12 under qemu TCG, no network but one hostfwd on 127.0.0.1).

1. `mur vm create --user-data FILE` of the terraform module's rendered user-data (the real terraform,
   the real CLI): cloud-init prepares the host, the deploy user logs in with the key the module was
   given, the host key is pinned through mur's vendor-data; preflight passes on pure cgroup v2 with
   aggregate shell-tool limits, a deploy as that non-root user answers an A2A task, `mur host
   prepare --check` finds nothing to change (cloud-init and prepare reach the same state), and the
   escape suite passes on its kernel.
2. `mur vm create --bare` (the real CLI), brought there by the `mur host prepare` line it prints,
   run as printed; a second run changes nothing; a distribution it does not support is refused.
3. `mur vm create --kernel 6.12` (the real CLI): the newer kernel's Landlock ABI, a deploy, the
   escape suite; `mur vm ls` and `destroy`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_support import FORK_40, READ_OUTSIDE, a2a_send, mur, mur_json, refused_outside, shell_task
from vm_suite import expected_failures, record, run_escape_suite
from vmboot import DEPLOY_USER

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "provision"))
from tf_render import terraform_user_data  # noqa: E402

pytestmark = [pytest.mark.requires_qemu, pytest.mark.requires_root, pytest.mark.slow]
TIMEOUT = ["--start-timeout", "900"]


def _tunnel_send(machine, home: Path, port: int, text: str, user: str, token: str | None = None) -> str:
    os.environ["HOME"] = str(home)
    from mur.deploy.targets.ssh import SSHTarget

    key = machine.root_key if user == "root" else machine.key
    t = SSHTarget("127.0.0.1", user=user, port=machine.port, key_file=str(key), known_hosts=str(machine.known_hosts))
    try:
        with t.forward(port) as fw:
            return a2a_send(fw.url, text, timeout=900, token=token)
    finally:
        t.close()


def _deploy_args(machine, user: str) -> list[str]:
    key = machine.root_key if user == "root" else machine.key
    return ["--host", "127.0.0.1", "--ssh-port", str(machine.port), "--ssh-user", user, "--ssh-key", str(key),
            "--known-hosts", str(machine.known_hosts)]


def _matrix_row(kernel: str, machine, suite: dict, deployed: bool) -> None:
    row = {"kernel": kernel, "release": machine.extra.get("kernel_release"), "landlock_abi": suite["abi"],
           "escape_passed": suite["passed"], "escape_failed": suite["failed"], "failed_names": suite["failed_names"],
           "flaky": suite["flaky"], "deploy": deployed}
    record(row)
    print(f"\n[kernel-matrix] {json.dumps(row)}")


def _shell_deploy_answers(machine, home, shell_capsule, user: str) -> dict:
    """Preflight + deploy of the shell capsule as `user`; a task forking past the pids bound."""
    report = mur_json("deploy", "-m", str(shell_capsule / "murmur.yaml"), *_deploy_args(machine, user), "--check",
                      home=home, timeout=1800)
    assert report["ok"], report
    checks = {c["name"]: c for c in report["checks"]}
    assert report["cgroup_mode"] == "unified" and checks["shell limits"]["ok"], checks
    # a prepared host: deploy elevates through the root helper only (its sudoers rule allows no shell)
    assert report["uid"] != 0 and report["sudo"] == "helper" and report["init"] == "systemd"
    res = mur_json("deploy", "-m", str(shell_capsule / "murmur.yaml"), *_deploy_args(machine, user), *TIMEOUT,
                   home=home, timeout=2400)
    forks, outside = json.loads(_tunnel_send(machine, home, res["service_port"], shell_task(FORK_40, READ_OUTSIDE),
                                             user, Path(res["token_file"]).read_text().strip()))
    assert "cgroup_pids_max" in forks["summary"] and "Cannot fork" in forks["data"], forks
    assert refused_outside(outside["data"]), outside
    mur("deploy", "destroy", res["deployment_id"], home=home, timeout=600)
    return report


# --- 1. the terraform-rendered user-data, booted ------------------------------------------------


@pytest.fixture(scope="module")
def tf_vm(vm_ready, tmp_path_factory):
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not on PATH")
    from mur import __version__
    from mur.provision import machines

    work = tmp_path_factory.mktemp("tf-render")
    key = work / "deploy_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # what an operator gives the module: their key, the deploy user; no host key (mur pins its own)
    user_data = terraform_user_data(work / "r", ssh_authorized_keys=[Path(f"{key}.pub").read_text().strip()],
                                    deploy_user=DEPLOY_USER, mur_version=__version__, kernel="keep")
    (work / "user-data.yaml").write_text(user_data)
    home = tmp_path_factory.mktemp("tf-home")
    env = {"MUR_VM_DIR": str(tmp_path_factory.mktemp("tf-vms"))}
    info = mur_json("vm", "create", "--name", "tfvm", "--kernel", "6.1", "--user-data", str(work / "user-data.yaml"),
                    "--ssh-key", str(key), "--deploy-user", DEPLOY_USER, home=home, env=env, timeout=2400)
    assert info["deploy_user"] == DEPLOY_USER and info["key"] == str(key)
    m = machines.get("tfvm", Path(env["MUR_VM_DIR"]))
    assert (m.dir / "user-data").read_text() == user_data  # booted unchanged
    yield m
    mur("vm", "destroy", "tfvm", home=home, env=env, check=False, timeout=300)


def test_cloud_init_prepared_the_host_from_terraform_user_data(tf_vm):
    r = tf_vm.ssh("cloud-init status --long; cat /etc/mur/host.json; id -nG; sudo -n true && echo sudo-ok",
                  user=DEPLOY_USER)
    assert r.returncode == 0, r.stderr
    assert "status: done" in r.stdout and '"deploy_user":"deployer"' in r.stdout
    assert "mur-deploy" in r.stdout and "sudo-ok" in r.stdout
    show = tf_vm.ssh("systemctl show user@$(id -u deployer).service -p Delegate -p DelegateControllers").stdout
    assert "Delegate=yes" in show and "memory" in show and "pids" in show, show


def test_prepare_finds_nothing_to_change_on_the_cloud_init_host(tf_vm, home):
    pub = tf_vm.key.with_suffix(".pub") if tf_vm.key.suffix else Path(str(tf_vm.key) + ".pub")
    res = mur("host", "prepare", *_deploy_args(tf_vm, "root"), "--deploy-user", DEPLOY_USER,
              "--authorized-key", str(pub), "--check", "--json", home=home, check=False, timeout=600)
    assert res.returncode == 0, res.stderr + res.stdout
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["changes"] == [] and out["refused"] is None, out


def test_non_root_deploy_with_shell_limits_on_the_cloud_init_host(tf_vm, home, runtime_bundle, shell_capsule):
    report = _shell_deploy_answers(tf_vm, home, shell_capsule, DEPLOY_USER)
    assert report["probe"]["landlock_abi"] == 2
    tf_vm.extra["deployed"] = True


def test_escape_suite_on_kernel_6_1(tf_vm):
    suite = run_escape_suite(tf_vm)
    _matrix_row("6.1", tf_vm, suite, bool(tf_vm.extra.get("deployed")))
    assert suite["abi"] == 2 and suite["passed"] + len(suite["flaky"]) >= 50, suite["tail"]
    # exactly what ABI 2 leaves open (vm_suite.KNOWN_GAPS: TCP in the no-namespace fallback), nothing else
    assert suite["failed_names"] == expected_failures(2) == [
        "test_connecting_or_listening_around_landlock_is_refused",
        "test_without_a_namespace_the_port_rules_fallback_says_so"], suite["tail"]


# --- 2. a bare VM, prepared by mur host prepare -------------------------------------------------


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
        res = mur("host", "prepare", *_deploy_args(m, "root"), "--authorized-key", str(Path(str(m.root_key) + ".pub")),
                  "--check", home=home, check=False, timeout=600)
        assert res.returncode == 1
        assert "error[E-PROV-001]" in res.stderr and "unsupported distribution ubuntu 24.04" in res.stderr
        assert "Traceback" not in res.stderr
    finally:
        bare_vm.ssh("cp /root/os-release.keep /usr/lib/os-release")


# --- 3. mur vm create with the newer kernel -----------------------------------------------------


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
    report = _shell_deploy_answers(m, home, shell_capsule, DEPLOY_USER)
    assert report["probe"]["landlock_abi"] >= 6
    suite = run_escape_suite(m)
    _matrix_row("6.12", m, suite, True)
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
