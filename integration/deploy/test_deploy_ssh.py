"""mur deploy to an existing "VM" over SSH, run as an operator would: an sshd container (testcontainers)
built from the local base image, no Python in it (the pinned one-file runtime brings its own) and
no systemd, deploying as root and as a non-root sudo user, from a clean HOME, through the real
CLI, with the host key verified and every A2A call authenticated with the deployment's token."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from deploy_support import ROOT, Deploying, a2a_send, mur, mur_json

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]


def target_args(vm, user="root", known_hosts=None):
    return ["--host", "127.0.0.1", "--ssh-port", str(vm.port), "--ssh-user", user, "--ssh-key", str(vm.key),
            "--known-hosts", str(known_hosts or vm.known_hosts())]


def send_via_tunnel(home, vm, result, text, user="root"):
    """Reach the loopback-bound service through an SSH forward, with the deployment's token."""
    os.environ["HOME"] = str(home)
    from mur.deploy.targets.ssh import SSHTarget

    t = SSHTarget("127.0.0.1", user=user, port=vm.port, key_file=str(vm.key), known_hosts=str(vm.known_hosts()))
    try:
        with t.forward(result["service_port"]) as fw:
            return a2a_send(fw.url, text, token=open(result["token_file"]).read().strip())
    finally:
        t.close()


def nothing_left(vm, dep_id: str, home: str = "/root") -> None:
    """destroy left nothing of the deployment on the target: files, processes, cgroups, crontab."""
    assert vm.sh(f"find / -xdev -name '*{dep_id}*' 2>/dev/null")[1].strip() == ""
    assert vm.sh(f"find /sys/fs/cgroup -name '{dep_id}' 2>/dev/null")[1].strip() == ""
    left = vm.sh(f"find {home}/.murmur 2>/dev/null | head -20")[1].strip()
    assert left == "", left  # the last deployment: no ~/.murmur at all
    assert vm.sh("ls -d /tmp/mur-payloads-* 2>/dev/null")[1].strip() == ""
    assert dep_id not in vm.sh("crontab -l -u root 2>/dev/null; crontab -l -u deployer 2>/dev/null")[1]
    assert not [p for p in vm.procs() if "mur" in p], vm.procs()


def test_root_deploy_redeploy_rollback_stop_destroy(sshd_vm, home, runtime_bundle, hello_capsule):
    vm = sshd_vm
    manifest = str(hello_capsule / "murmur.yaml")
    report = mur_json("deploy", "-m", manifest, *target_args(vm), "--check", home=home)
    assert report["ok"] and report["init"] == "supervisor" and report["runtime"]["version"] == report["runtime"]["pinned"]
    assert report["boot"] == "cron" and report["probe"]["landlock_abi"] >= 1
    assert report["containment"]["achieved"] in ("scoped", "sealed")  # sealed where the probe built the tools' root
    assert vm.sh("ls /root/.murmur/deployments")[0] != 0  # --check changed nothing but the runtime cache

    first = mur_json("deploy", "-m", manifest, *target_args(vm), home=home)
    dep = first["deployment_id"]
    assert first["provider"] == "ssh" and first["release"] == 1 and first["uploaded"] > 0 and first["boot"] == "cron"
    assert send_via_tunnel(home, vm, first, "world") == "Hello, world!"
    assert vm.sh(f"stat -c %a /root/.murmur/deployments/{dep}/releases/1/a2a-token") == (0, "600\n")
    assert f"# mur:{dep}" in vm.sh("crontab -l")[1]

    # The printed tunnel command works as printed (a free local port), and `mur send ID` finds the token.
    tunnel = subprocess.Popen(shlex.split(first["tunnel"]), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env={**os.environ, "HOME": str(home)})
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = mur("send", dep, "tunnel", home=home, check=False)
            if r.returncode == 0:
                break
            time.sleep(0.5)
        assert r.stdout == "Hello, tunnel!\n", r.stderr
        bad = mur("send", first["url"], "x", home=home, env={"MURMUR_A2A_TOKEN": "wrong"}, check=False)
        assert bad.returncode == 1 and "error[E-A2A-002]" in bad.stderr  # the endpoint is not open to anyone
    finally:
        tunnel.terminate()
        tunnel.wait()

    again = mur_json("deploy", "-m", manifest, *target_args(vm), home=home)
    assert again["unchanged"] and again["uploaded"] == 0 and again["deployment_id"] == dep

    second = mur_json("deploy", "-m", manifest, *target_args(vm), "--env", "HELLO_GREETING=Bonjour", home=home)
    assert second["release"] == 2 and second["service_port"] == first["service_port"]
    assert send_via_tunnel(home, vm, second, "monde") == "Bonjour, monde!"
    assert vm.sh(f"stat -c %a /root/.murmur/deployments/{dep}/releases/2/env") == (0, "600\n")

    back = mur_json("deploy", "rollback", dep, home=home)
    assert back["release"] == 1 and back["previous"] == 2
    assert send_via_tunnel(home, vm, first, "again") == "Hello, again!"

    status = mur("deploy", "status", dep[:12], home=home)
    assert "status    running" in status.stdout and "answers   yes" in status.stdout
    assert not any(word in status.stdout for word in ("True", "None", "False"))
    logs = mur_json("deploy", "logs", dep, "-n", "50", home=home)
    assert any('"session_id"' in line for line in logs["lines"]) and any("mur supervise" in x for x in logs["lines"])

    # A status names the command that holds the deployment (read, never taken). This target is a
    # container: /proc/locks there hides a lock whose flock(1) has exited; the holder's fd is read too.
    holder = Deploying(["deploy", "stop", dep], home, stop_at="stop:begin",
                       env={"MUR_DEPLOY_DEAD_AFTER": "120", "MUR_DEPLOY_KEEPALIVE": "1"})
    holder.stopped()
    held = mur_json("deploy", "status", dep, home=home)
    assert held["state"]["locked_by"]["command"] == f"mur deploy stop {dep}"
    holder.kill()

    stopped = mur_json("deploy", "stop", dep, "--lock-wait", "30", home=home)
    assert stopped["status"] == "stopped"
    assert not [p for p in vm.procs() if "mur" in p], vm.procs()
    assert vm.sh(f"find /sys/fs/cgroup -name {dep}")[1].strip() == ""

    mur("deploy", "destroy", dep, home=home)
    nothing_left(vm, dep)
    assert mur_json("deploy", "ls", home=home) == []
    assert not (home / ".murmur" / "deploy_keys" / dep).exists()


def test_non_root_without_systemd_restarts_after_kill_9_bounds_sessions_and_survives_a_reboot(
        sshd_vm, home, runtime_bundle, hello_capsule):
    vm = sshd_vm
    res = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), *target_args(vm, "deployer"),
                   "--keep-sessions", "1", home=home)
    dep = res["deployment_id"]
    root = f"/home/deployer/.murmur/deployments/{dep}"
    assert vm.sh(f"test -L {root}/current && stat -c %U {root}/releases/1/murmur.yaml") == (0, "deployer\n")
    assert vm.sh(f"test -e /root/.murmur/deployments/{dep}")[0] != 0
    # The supervisor runs as root (through sudo) to own a cgroup; the capsule runs as deployer.
    state = json.loads(vm.sh(f"cat {root}/run/state.json")[1])
    uid = vm.sh(f"awk '/^Uid:/{{print $2}}' /proc/{state['child_pid']}/status")[1].strip()
    assert uid == "1000" and state["cgroup"]
    assert send_via_tunnel(home, vm, res, "from deployer", user="deployer") == "Hello, from deployer!"

    # kill -9 of the service, three times: the supervisor restarts it; past sessions stay bounded
    for i in range(3):
        child = json.loads(vm.sh(f"cat {root}/run/state.json")[1])["child_pid"]
        vm.sh(f"kill -9 {child}")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            st = json.loads(vm.sh(f"cat {root}/run/state.json")[1])
            if st.get("restarts") == i + 1 and st.get("state") == "running":
                break
            time.sleep(0.5)
        assert st["restarts"] == i + 1 and st["state"] == "running", st
    sessions = vm.sh(f"ls -d {root}/releases/*/workdir/ses_*")[1].split()
    assert 1 <= len(sessions) <= 2, sessions  # 4 starts; 1 kept before the last one, plus the running one
    assert send_via_tunnel(home, vm, res, "after kills", user="deployer") == "Hello, after kills!"

    # an unclean reboot (power loss): cron's @reboot brings the supervisor back
    vm.restart(unclean=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = mur("deploy", "status", dep, "--json", home=home, check=False)
        if status.returncode == 0:
            break
        time.sleep(1)
    assert json.loads(status.stdout)["status"] == "running", status.stdout
    assert send_via_tunnel(home, vm, res, "after reboot", user="deployer") == "Hello, after reboot!"

    mur("deploy", "destroy", dep, home=home)
    nothing_left(vm, dep, "/home/deployer")


def test_an_unclean_restart_never_trusts_or_signals_a_recycled_pid(bare_vm, home, runtime_bundle, hello_capsule):
    """No systemd, no cron: deploy needs --no-boot-hook. After a power loss the pid files name
    pids that now belong to other processes; status, start, stop and destroy must not believe
    them or signal them."""
    vm = bare_vm
    manifest = str(hello_capsule / "murmur.yaml")
    r = mur("deploy", "-m", manifest, *target_args(vm), home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-007]" in r.stderr and "--no-boot-hook" in r.stderr
    assert mur_json("deploy", "ls", home=home) == []
    res = mur_json("deploy", "-m", manifest, *target_args(vm), "--no-boot-hook", home=home)
    dep = res["deployment_id"]
    run_dir = f"/root/.murmur/deployments/{dep}/run"
    vm.restart(unclean=True)
    # a process of someone else now has the recorded pids (a fresh pid namespace reuses low pids)
    vm.sh("setsid sleep 600 </dev/null >/dev/null 2>&1 &")
    stranger = vm.sh("for p in /proc/[0-9]*; do [ \"$(cat $p/comm)\" = sleep ] && basename $p; done")[1].split()[0]
    for name in ("supervisor.pid", "child.pid"):
        _, old = vm.sh(f"cat {run_dir}/{name}")
        vm.sh(f"echo {stranger} {old.split()[1]} {old.split()[2]} > {run_dir}/{name}")
    status = mur("deploy", "status", dep, "--json", home=home, check=False)
    assert status.returncode == 3 and json.loads(status.stdout)["service"]["running"] is False
    mur("deploy", "stop", dep, home=home)
    assert vm.sh(f"test -d /proc/{stranger}")[0] == 0
    mur_json("deploy", "start", dep, home=home)
    assert send_via_tunnel(home, vm, res, "after restart") == "Hello, after restart!"
    vm.sh(f"echo {stranger} 1 x > {run_dir}/child.pid")  # and again, while the real service runs
    mur("deploy", "destroy", dep, home=home)
    assert vm.sh(f"test -d /proc/{stranger}")[0] == 0  # never signalled
    vm.sh(f"kill {stranger}")
    nothing_left(vm, dep)


def _deploy_until(home, vm, manifest, marker: str, extra=(), sig=signal.SIGINT):
    """Start `mur deploy`, send `sig` once its progress shows `marker`; returns (returncode, stderr)."""
    cmd = [sys.executable, "-m", "mur", "deploy", "-m", manifest, *target_args(vm), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HOME": str(home)}, cwd=str(ROOT))
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            proc.send_signal(sig)
            break
    out, err = proc.communicate(timeout=300)
    return proc.returncode, "".join(seen) + err


@pytest.mark.parametrize("marker", ["· upload release", "· start release"])
def test_ctrl_c_during_a_first_deploy_leaves_nothing(sshd_vm, home, runtime_bundle, hello_capsule, marker):
    vm = sshd_vm
    rc, err = _deploy_until(home, vm, str(hello_capsule / "murmur.yaml"), marker)
    assert rc == 130 and "interrupted" in err and "Traceback" not in err, err
    records = mur_json("deploy", "ls", home=home)
    for rec in records:  # either nothing, or a record destroy can remove
        assert rec["status"] == "incomplete"
        mur("deploy", "destroy", rec["deployment_id"], home=home)
    assert vm.sh("ls -A /root/.murmur/deployments 2>/dev/null")[1].strip() == ""
    assert not [p for p in vm.procs() if "mur" in p], vm.procs()
    assert "# mur:" not in vm.sh("crontab -l 2>/dev/null")[1]


def test_a_dropped_connection_mid_deploy_leaves_an_incomplete_record_that_destroy_removes(
        sshd_vm, home, runtime_bundle, hello_capsule):
    vm = sshd_vm
    cmd = [sys.executable, "-m", "mur", "deploy", "-m", str(hello_capsule / "murmur.yaml"), *target_args(vm)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HOME": str(home)}, cwd=str(ROOT))
    for line in proc.stderr:
        if "· start release" in line:
            vm.container.kill()  # the machine goes away: the connection drops mid-start
            break
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "error[E-DEPLOY-003]" in err and "Traceback" not in err, err
    (rec,) = mur_json("deploy", "ls", home=home)
    assert rec["status"] == "incomplete"
    vm.container.start()
    from deploy_support import wait_for_ssh

    wait_for_ssh(vm.port)
    mur("deploy", "destroy", rec["deployment_id"], home=home)
    nothing_left(vm, rec["deployment_id"])


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
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    forged.write_text(f"[127.0.0.1]:{vm.port} {' '.join(other.read_text().split()[:2])}\n")
    r = mur("deploy", "-m", manifest, *target_args(vm, known_hosts=forged), "--check", "--trust-new-host",
            home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-009]" in r.stderr and "does not match" in r.stderr


def test_a_broken_redeploy_leaves_the_previous_release_serving(sshd_vm, home, runtime_bundle, hello_capsule, tmp_path):
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
    assert "remote stderr" in r.stderr and "Traceback" not in r.stderr
    assert send_via_tunnel(home, vm, good, "still") == "Hello, still!"
    status = mur_json("deploy", "status", good["deployment_id"], home=home)
    assert status["release"] == 1 and status["status"] == "running"
    assert vm.sh(f"ls /root/.murmur/deployments/{good['deployment_id']}/releases")[1].split() == ["1"]
    mur("deploy", "destroy", good["deployment_id"], home=home)

    # the first time: nothing is left at all
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(vm), "--no-precompile", home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-004]" in r.stderr and "remote log" in r.stderr
    assert mur_json("deploy", "ls", home=home) == []
    assert vm.sh("ls -A /root/.murmur 2>/dev/null")[1].strip() == ""
    assert not [p for p in vm.procs() if "mur" in p], vm.procs()


def test_an_unmet_containment_floor_is_refused_before_anything_changes(sshd_vm, home, runtime_bundle, hello_capsule,
                                                                        tmp_path):
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

    from mur import __version__
    from mur.platform import current_platform

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
    # a project-level deploy.release_source is honoured like the flag
    (cap / ".murmur").mkdir()
    (cap / ".murmur" / "config.yaml").write_text(f"deploy:\n  release_source: {rel}\n")
    r = mur("deploy", "-m", str(cap / "murmur.yaml"), *target_args(sshd_vm), home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-007]" in r.stderr
    assert f"{name} reports mur {__version__}; pinned 9.9.9" in r.stderr
    assert (home / ".murmur" / "bin" / name).is_file()  # verified and cached
    assert sshd_vm.sh("test -e /root/.murmur/deployments")[0] != 0
