"""mur deploy to a real virtual machine: Debian 12 under qemu TCG (systemd 252, pure cgroup v2,
kernel 6.1 = Landlock ABI 2), reached over SSH through a hostfwd on 127.0.0.1 with restrict=on.

One VM boot serves every test in this module (~25-80 s to SSH here). Exercises the systemd +
Delegate= path as root and as a non-root sudo user, a preflight on an older Landlock ABI, and a
shell tool under aggregate cgroup limits inside the VM."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from deploy_support import FORK_40, READ_OUTSIDE, a2a_send, refused_outside, mur, mur_json, shell_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vm"))
from vmboot import boot_vm, build_vm  # noqa: E402

pytestmark = [pytest.mark.requires_qemu, pytest.mark.slow]
VM_TIMEOUT = ["--start-timeout", "900"]


@pytest.fixture(scope="module")
def vm():
    if shutil.which("qemu-system-x86_64") is None or shutil.which("debootstrap") is None:
        pytest.skip("needs qemu-system-x86_64 and debootstrap")
    if os.geteuid() != 0:
        pytest.skip("building the VM image needs root (debootstrap)")
    machine = boot_vm(build_vm())
    yield machine
    machine.close()


def args(vm, home: Path, user: str = "root") -> list[str]:
    kh = vm.write_known_hosts(home / "known_hosts")
    return ["--host", "127.0.0.1", "--ssh-port", str(vm.ssh_port), "--ssh-user", user, "--ssh-key", vm.key,
            "--known-hosts", str(kh)]


def tunnel_send(vm, home: Path, res: dict, text: str, user: str = "root") -> str:
    os.environ["HOME"] = str(home)
    from mur.deploy.targets.ssh import SSHTarget

    t = SSHTarget("127.0.0.1", user=user, port=vm.ssh_port, key_file=vm.key, known_hosts=str(home / "known_hosts"))
    try:
        with t.forward(res["service_port"]) as fw:
            return a2a_send(fw.url, text, timeout=900, token=Path(res["token_file"]).read_text().strip())
    finally:
        t.close()


def test_preflight_reports_the_vm_kernel(vm, home, runtime_bundle, shell_capsule):
    report = mur_json("deploy", "-m", str(shell_capsule / "murmur.yaml"), *args(vm, home), "--check", home=home,
                      timeout=1800)
    assert report["ok"], report
    assert report["probe"]["landlock_abi"] == 2 and report["cgroup_mode"] == "unified"
    assert report["systemd"] is True and report["init"] == "systemd"
    assert report["containment"]["declared"] == "scoped" and report["containment"]["met"]
    assert report["cgroup_sessions"] is True


def test_systemd_root_deploy_with_a_shell_tool_under_aggregate_limits(vm, home, runtime_bundle, shell_capsule):
    res = mur_json("deploy", "-m", str(shell_capsule / "murmur.yaml"), *args(vm, home), *VM_TIMEOUT, home=home,
                   timeout=2400)
    dep = res["deployment_id"]
    assert res["init"] == "systemd"
    unit = f"mur-{dep}.service"
    show = vm.ssh(f"systemctl show {unit} -p Delegate -p DelegateControllers -p ActiveState -p Restart").stdout
    assert "Delegate=yes" in show and "ActiveState=active" in show and "pids" in show and "memory" in show
    assert vm.ssh(f"systemctl is-enabled {unit}").stdout.strip() == "enabled"  # comes back after a reboot
    assert res["boot"] == "systemd"
    forks, outside = json.loads(tunnel_send(vm, home, res, shell_task(FORK_40, READ_OUTSIDE)))
    assert "cgroup_pids_max" in forks["summary"] and "Cannot fork" in forks["data"], forks  # pids_max: 12
    assert refused_outside(outside["data"]), outside  # Landlock ABI 2
    mur("deploy", "destroy", dep, home=home, timeout=600)
    assert vm.ssh(f"systemctl cat {unit}").returncode != 0
    assert vm.ssh(f"test -e /root/.murmur/deployments/{dep}").returncode != 0
    assert vm.ssh("pgrep -f '[m]ur run' || true").stdout.strip() == ""


def test_systemd_non_root_deploy(vm, home, runtime_bundle, hello_capsule):
    res = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), *args(vm, home, "deployer"), *VM_TIMEOUT,
                   home=home, timeout=2400)
    dep = res["deployment_id"]
    show = vm.ssh(f"systemctl show mur-{dep}.service -p User -p Delegate -p ActiveState").stdout
    assert "User=deployer" in show and "Delegate=yes" in show and "ActiveState=active" in show
    assert tunnel_send(vm, home, res, "vm", user="deployer") == "Hello, vm!"
    again = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), *args(vm, home, "deployer"), home=home,
                     timeout=1200)
    assert again["unchanged"] and again["uploaded"] == 0
    status = mur_json("deploy", "status", dep, home=home)
    assert status["status"] == "running" and status["service"]["state"] == "active"
    assert '"session_id"' in mur("deploy", "logs", dep, home=home).stdout  # the journal, read through sudo
    mur("deploy", "destroy", dep, home=home, timeout=600)
    assert vm.ssh(f"test -e /home/deployer/.murmur/deployments/{dep}").returncode != 0
    assert vm.ssh(f"systemctl is-active mur-{dep}.service").stdout.strip() != "active"


def test_supervisor_on_pure_cgroup_v2_as_a_non_root_user(vm, home, runtime_bundle, shell_capsule):
    """No systemd for the service (--init supervisor): the supervisor (root, through sudo) owns
    /sys/fs/cgroup/mur/<dep> and delegates it to the deploy user, whose runtime then creates the
    per-session cgroup for shell tools inside it.

    The prepared host's rule lets the deploy user run only the root helper, which manages systemd
    units: there the supervisor would run as the user, with no cgroup for shell tools' aggregate
    limits, and preflight refuses. A rule that also allows a shell (a host with plain passwordless
    sudo) gives the supervisor root."""
    cmd = ["deploy", "-m", str(shell_capsule / "murmur.yaml"), *args(vm, home, "deployer"), "--init", "supervisor",
           "--no-boot-hook"]
    refused = mur(*cmd, "--check", home=home, timeout=1800, check=False)
    assert refused.returncode != 0 and "no delegable cgroup" in refused.stdout + refused.stderr, refused.stderr
    rule = "/etc/sudoers.d/zz-mur-test-shell"
    vm.ssh(f"echo 'deployer ALL=(root) NOPASSWD: /usr/bin/sh, /bin/sh' > {rule} && chmod 0440 {rule}")
    try:
        _supervisor_deploy(vm, home, cmd)
    finally:
        vm.ssh(f"rm -f {rule}")


def _supervisor_deploy(vm, home: Path, cmd: list[str]) -> None:
    res = mur_json(*cmd, *VM_TIMEOUT, home=home, timeout=2400)
    dep = res["deployment_id"]
    assert res["init"] == "supervisor"
    state = json.loads(vm.ssh(f"cat /home/deployer/.murmur/deployments/{dep}/run/state.json").stdout)
    assert state["cgroup"] == {"unified": f"/sys/fs/cgroup/mur/{dep}"}, json.dumps(state["cgroup"])
    assert vm.ssh(f"stat -c %U /sys/fs/cgroup/mur/{dep}").stdout.strip() == "deployer"
    forks, outside = json.loads(tunnel_send(vm, home, res, shell_task(FORK_40, READ_OUTSIDE),
                                            user="deployer"))
    assert "cgroup_pids_max" in forks["summary"] and "Cannot fork" in forks["data"], forks
    assert refused_outside(outside["data"]), outside
    mur("deploy", "destroy", dep, home=home, timeout=600)
    assert vm.ssh(f"test -e /sys/fs/cgroup/mur/{dep}").returncode != 0
    assert vm.ssh("pgrep -f '[m]ur (run|supervise)' || true").stdout.strip() == ""
