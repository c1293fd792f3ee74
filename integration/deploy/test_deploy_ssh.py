"""mur deploy to an existing "VM" over SSH: an sshd container built from the local base image (no
Python in it: the pinned one-file runtime brings its own), deploying as root and as a non-root sudo
user, from a clean HOME, through the real CLI, with the host key verified."""

from __future__ import annotations

import json
import os

import pytest

from deploy_support import a2a_send, mur, mur_json

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]


def target_args(vm, user="root", known_hosts=None):
    return ["--host", "127.0.0.1", "--ssh-port", str(vm.port), "--ssh-user", user, "--ssh-key", str(vm.key),
            "--known-hosts", str(known_hosts or vm.known_hosts())]


def send_via_tunnel(home, vm, result, text, user="root"):
    """Reach the loopback-bound service the way the printed tunnel command does (SSH forwarding)."""
    os.environ["HOME"] = str(home)
    from mur.deploy.targets.ssh import SSHTarget

    t = SSHTarget("127.0.0.1", user=user, port=vm.port, key_file=str(vm.key), known_hosts=str(vm.known_hosts()))
    try:
        with t.forward(result["service_port"]) as fw:
            return a2a_send(fw.url, text)
    finally:
        t.close()


def test_root_deploy_redeploy_rollback_stop_destroy(sshd_vm, home, runtime_bundle, hello_capsule):
    vm = sshd_vm
    manifest = str(hello_capsule / "murmur.yaml")
    report = mur_json("deploy", "-m", manifest, *target_args(vm), "--check", home=home)
    assert report["ok"] and report["init"] == "supervisor" and report["runtime"]["version"] == report["runtime"]["pinned"]
    assert report["probe"]["landlock_abi"] >= 1 and report["containment"]["achieved"] == "scoped"
    assert not vm.sh("ls /root/.murmur/deployments")[0] == 0  # --check changed nothing but the runtime cache

    first = mur_json("deploy", "-m", manifest, *target_args(vm), home=home)
    assert first["provider"] == "ssh" and first["release"] == 1 and first["uploaded"] > 0
    assert first["tunnel"].startswith(f"ssh -N -L {first['service_port']}:127.0.0.1:{first['service_port']} -p {vm.port}")
    assert send_via_tunnel(home, vm, first, "world") == "Hello, world!"

    again = mur_json("deploy", "-m", manifest, *target_args(vm), home=home)
    assert again["unchanged"] and again["uploaded"] == 0 and again["deployment_id"] == first["deployment_id"]

    second = mur_json("deploy", "-m", manifest, *target_args(vm), "--env", "HELLO_GREETING=Bonjour", home=home)
    assert second["release"] == 2 and second["service_port"] == first["service_port"]
    assert send_via_tunnel(home, vm, second, "monde") == "Bonjour, monde!"
    env_file = f"/root/.murmur/deployments/{first['deployment_id']}/releases/2/env"
    assert vm.sh(f"stat -c %a {env_file}") == (0, "600\n")

    back = mur_json("deploy", "rollback", first["deployment_id"], home=home)
    assert back["release"] == 1 and back["previous"] == 2
    assert send_via_tunnel(home, vm, first, "again") == "Hello, again!"

    status = mur_json("deploy", "status", first["deployment_id"][:12], home=home)
    assert status["status"] == "running" and status["agent_card_ok"] and status["release"] == 1
    logs = mur("deploy", "logs", first["deployment_id"], "-n", "50", home=home).stdout
    assert '"session_id"' in logs and "mur supervise" in logs

    stopped = mur_json("deploy", "stop", first["deployment_id"], home=home)
    assert stopped["status"] == "stopped"
    assert not [p for p in vm.procs() if "mur" in p], vm.procs()
    assert vm.sh("ls /sys/fs/cgroup/pids/mur 2>/dev/null")[1].strip() == ""

    mur("deploy", "destroy", first["deployment_id"], home=home)
    assert vm.sh("ls -A /root/.murmur/deployments")[1].strip() == ""
    assert vm.sh("ls /root/.murmur/bin")[1].strip() == ""  # no other deployment uses the runtime
    assert mur_json("deploy", "ls", home=home) == []


def test_non_root_sudo_user(sshd_vm, home, runtime_bundle, hello_capsule):
    vm = sshd_vm
    res = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), *target_args(vm, "deployer"), home=home)
    dep = res["deployment_id"]
    root = f"/home/deployer/.murmur/deployments/{dep}"
    assert vm.sh(f"test -L {root}/current && stat -c %U {root}/releases/1/murmur.yaml") == (0, "deployer\n")
    assert vm.sh(f"test -e /root/.murmur/deployments/{dep}")[0] != 0
    # The supervisor runs as root (through sudo) to own a cgroup; the capsule runs as deployer.
    state = json.loads(vm.sh(f"cat {root}/run/state.json")[1])
    uid = vm.sh(f"awk '/^Uid:/{{print $2}}' /proc/{state['child_pid']}/status")[1].strip()
    assert uid == "1000" and state["cgroup"]
    assert send_via_tunnel(home, vm, res, "from deployer", user="deployer") == "Hello, from deployer!"
    mur("deploy", "destroy", dep, home=home)
    assert vm.sh(f"test -e {root}")[0] != 0
    assert not [p for p in vm.procs() if "mur" in p]


def test_host_keys_are_verified(sshd_vm, home, runtime_bundle, hello_capsule, tmp_path):
    vm = sshd_vm
    manifest = str(hello_capsule / "murmur.yaml")
    unknown = tmp_path / "kh-empty"
    r = mur("deploy", "-m", manifest, *target_args(vm, known_hosts=unknown), "--check", home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-009]" in r.stderr and "--trust-new-host" in r.stderr
    r = mur("deploy", "-m", manifest, *target_args(vm, known_hosts=unknown), "--check", "--trust-new-host",
            home=home, check=False)
    assert r.returncode == 0, r.stderr
    recorded = unknown.read_text()
    assert f"[127.0.0.1]:{vm.port} ssh-ed25519 " in recorded and vm.host_pub.split()[1] in recorded
    forged = tmp_path / "kh-forged"
    other = (tmp_path / "other.pub")
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    forged.write_text(f"[127.0.0.1]:{vm.port} {' '.join(other.read_text().split()[:2])}\n")
    r = mur("deploy", "-m", manifest, *target_args(vm, known_hosts=forged), "--check", "--trust-new-host",
            home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-009]" in r.stderr and "does not match" in r.stderr


def test_a_failed_start_leaves_the_previous_release_serving(sshd_vm, home, runtime_bundle, hello_capsule, tmp_path):
    import shutil

    vm = sshd_vm
    cap = tmp_path / "cap"
    shutil.copytree(hello_capsule, cap)
    good = mur_json("deploy", "-m", str(cap / "murmur.yaml"), *target_args(vm), home=home)
    (cap / "capsule.wasm").write_bytes(b"\0asm this is not a component")
    # compiled here first: a component that cannot compile is refused before the target is touched
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(vm), home=home, check=False)
    assert r.returncode == 1 and "error[E-RUN-001]: capsule.wasm failed to compile" in r.stderr
    # the target's own failure path: let it compile, and fail to start
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(vm), "--no-precompile", home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-004]" in r.stderr and "previous release keeps serving" in r.stderr
    assert "remote stderr" in r.stderr
    assert send_via_tunnel(home, vm, good, "still") == "Hello, still!"
    status = mur_json("deploy", "status", good["deployment_id"], home=home)
    assert status["release"] == 1 and status["status"] == "running"
    mur("deploy", "destroy", good["deployment_id"], home=home)

    # the first time: nothing is left running
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(vm), "--no-precompile", home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-004]" in r.stderr and "remote log" in r.stderr
    assert not [p for p in vm.procs() if "mur" in p]
    for rec in mur_json("deploy", "ls", home=home):
        assert rec["status"] == "failed"
        mur("deploy", "destroy", rec["deployment_id"], home=home)


def test_an_unmet_containment_floor_is_refused_before_anything_changes(sshd_vm, home, runtime_bundle, hello_capsule,
                                                                        tmp_path):
    import shutil

    cap = tmp_path / "sealed"
    shutil.copytree(hello_capsule, cap)
    text = (cap / "murmur.yaml").read_text().replace("capabilities:\n", "capabilities:\n  containment: sealed\n")
    (cap / "murmur.yaml").write_text(text)
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(sshd_vm), home=home, check=False)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-2].startswith(
        "error[E-CAP-003]: declared containment class 'sealed' is not achievable on root@127.0.0.1")
    assert sshd_vm.sh("test -e /root/.murmur/deployments")[0] != 0
    assert mur_json("deploy", "ls", home=home) == []


def test_a_pinned_version_comes_from_the_release_source_and_is_checked_on_the_target(
        sshd_vm, home, runtime_bundle, hello_capsule, tmp_path):
    """A capsule pinning another mur version gets its runtime from a release source, verified by
    sha256; on the target the runtime must report exactly the pin. Here the release source holds
    this checkout's runtime under the name mur-9.9.9-...: it verifies, uploads, runs, reports
    this version, and the deploy stops (E-DEPLOY-007) before any release is written."""
    import hashlib
    import shutil

    from mur import __version__
    from mur.deploy.bundle import current_platform

    cap = tmp_path / "pinned"
    shutil.copytree(hello_capsule, cap)
    (cap / "murmur.yaml").write_text('mur_version: "9.9.9"\n' + (cap / "murmur.yaml").read_text())
    rel = tmp_path / "releases"
    rel.mkdir()
    name = f"mur-9.9.9-{current_platform()}"
    shutil.copyfile(runtime_bundle, rel / name)
    digest = hashlib.sha256((rel / name).read_bytes()).hexdigest()
    (rel / "checksums.txt").write_text(f"{'0' * 64}  wrong-file\n")
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(sshd_vm), "--release-source", str(rel),
            home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-006]" in r.stderr and f"no entry for {name}" in r.stderr
    (rel / "checksums.txt").write_text(f"{'f' * 64}  {name}\n")
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(sshd_vm), "--release-source", str(rel),
            home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-006]" in r.stderr and "fails verification" in r.stderr
    assert not (home / ".murmur" / "bin" / name).exists()
    (rel / "checksums.txt").write_text(f"{digest}  {name}\n")
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(sshd_vm), "--release-source", str(rel),
            home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-007]" in r.stderr
    assert f"{name} reports mur {__version__}; pinned 9.9.9" in r.stderr
    assert (home / ".murmur" / "bin" / name).is_file()  # verified and cached
    assert sshd_vm.sh("test -e /root/.murmur/deployments")[0] != 0
