"""mur deploy keeps its guarantees when operators, processes and links fail (issue 25), against real
sshd "VMs" (testcontainers) through the real CLI, with short deadlines (deploy_support.FAST):

* two operators at once: one lock on the target, the holder named, --lock-wait;
* `kill -9` between the switch and the restart: `status` says `diverged`, the next deploy repairs
  (never `unchanged` while the old version serves), rollback finds its release on the target and
  the record shows the version rolled back to;
* a silent link (the VM frozen) fails with E-DEPLOY-003 naming the step within the deadlines, and
  one Ctrl-C ends the command within the undo budget;
* a full disk names the filesystem and the bytes, and leaves nothing;
* a crash loop is `crash-looping`; a release that cannot start fails at once with its log;
* a refused redeploy never touches the serving release's material;
and after each: record == current == serving, and nothing at all is left after destroy.

Independent scenarios run at once, each on its own VM (CI time)."""

from __future__ import annotations

import json
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from deploy_support import (
    FAST, Deploying, current_release, mur, murmur_files, serving_release, sshd_container,
)

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]


def target_args(vm, user="root"):
    return ["--host", "127.0.0.1", "--ssh-port", str(vm.port), "--ssh-user", user, "--ssh-key", str(vm.key),
            "--known-hosts", str(vm.known_hosts())]


# the scenarios that run side by side on a loaded machine keep a longer silence before the link is
# called dead (the silent-link test runs alone, with FAST's 3 s)
STEADY = {**FAST, "MUR_DEPLOY_DEAD_AFTER": "15", "MUR_DEPLOY_KEEPALIVE": "1"}


def run(*args, home, check=True, **kw):
    return mur(*args, home=home, check=check, env={**STEADY, **kw.pop("env", {})}, **kw)


def js(*args, home, **kw):
    proc = run(*args, "--json", home=home, **kw)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def consistent(vm, home, dep, user_home="/root") -> dict:
    """record == current == serving, and status says running: returns the status object."""
    st = js("deploy", "status", dep, home=home)
    assert st["status"] == "running", st
    cur = current_release(vm, dep, user_home)
    assert st["release"] == cur == serving_release(vm, st["service_port"]) == st["state"]["serving"], st
    return st


def destroyed_without_trace(vm, home, *deps, user_home="/root") -> None:
    for dep in deps:
        run("deploy", "destroy", dep, home=home)
    assert murmur_files(vm, user_home) == [], murmur_files(vm, user_home)
    assert not [p for p in vm.procs() if "mur" in p], vm.procs()
    assert "# mur:" not in vm.sh("crontab -l 2>/dev/null; crontab -l -u deployer 2>/dev/null")[1]


def capsule(src: Path, dst: Path, version: str = "0.1.0") -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("workdir", ".murmur"))
    text = (dst / "murmur.yaml").read_text()
    (dst / "murmur.yaml").write_text(text.replace('version: "0.1.0"', f'version: "{version}"')
                                     .replace("version: 0.1.0", f"version: {version}"))
    return dst / "murmur.yaml"


def parallel(**scenarios):
    """Run scenarios at once (each brings its own VM); the first failure is raised, named."""
    with ThreadPoolExecutor(len(scenarios)) as pool:
        futures = {pool.submit(fn): name for name, fn in scenarios.items()}
        errors = []
        for fut, name in futures.items():
            try:
                fut.result()
            except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
                errors.append((name, exc))
    if errors:
        name, exc = errors[0]
        raise AssertionError(f"scenario {name} failed: {exc}\n(also failed: {[n for n, _ in errors[1:]]})") from exc


# --- scenarios ----------------------------------------------------------------------------------


def two_operators(vm, home, manifest, other_home):
    # the first stops itself while it holds the lock (its link stays up: a long DEAD_AFTER)
    d1 = Deploying(["deploy", "-m", manifest, *target_args(vm)], home, env={**STEADY, "MUR_DEPLOY_DEAD_AFTER": "60"},
                   stop_at="stage:begin")
    d1.stopped()
    r = run("deploy", "-m", manifest, *target_args(vm), home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-013]" in r.stderr, r.stderr
    assert f"(pid {d1.proc.pid} on " in r.stderr and "--lock-wait" in r.stderr
    d3 = Deploying(["deploy", "-m", manifest, *target_args(vm), "--lock-wait", "300", "--json"], home, env=STEADY)
    d3.wait_for("lock", "waiting")
    d1.cont()
    rc1, _out, err1 = d1.finish()
    assert rc1 == 0, err1
    rc3, out3, err3 = d3.finish()
    assert rc3 == 0 and "waiting up to 300s" in err3, err3
    res = json.loads(out3.strip().splitlines()[-1])
    assert res["unchanged"] and res["release"] == 1  # it waited, then found the first one's release serving
    dep = res["deployment_id"]
    consistent(vm, home, dep)
    assert len(js("deploy", "ls", home=home)) == 1  # one deployment, not two
    # another operator (another HOME) deploying the same capsule at the same time: their own deployment
    d4 = Deploying(["deploy", "-m", manifest, *target_args(vm), "--env", "HELLO_GREETING=Hi", "--json"], other_home,
                   env=STEADY)
    again = js("deploy", "-m", manifest, *target_args(vm), home=home)
    rc4, out4, err4 = d4.finish()
    assert rc4 == 0, err4
    theirs = json.loads(out4.strip().splitlines()[-1])
    assert theirs["deployment_id"] != dep and again["unchanged"]
    consistent(vm, other_home, theirs["deployment_id"])
    consistent(vm, home, dep)
    run("deploy", "destroy", theirs["deployment_id"], home=other_home)
    destroyed_without_trace(vm, home, dep)


def killed_before_the_switch_then_diverged(vm, home, manifest, manifest_v2):
    first = js("deploy", "-m", manifest, *target_args(vm), home=home)
    dep = first["deployment_id"]
    d = Deploying(["deploy", "-m", manifest_v2, "--id", dep, *target_args(vm)], home, env=STEADY, stop_at="start:begin")
    d.stopped()
    d.kill()  # kill -9 once release 2 is complete, just before the one command that switches and restarts
    root = f"/root/.murmur/deployments/{dep}"
    assert vm.sh(f"readlink {root}/current")[1].strip() == "releases/1"  # nothing was switched without a restart
    # `current` ahead of what serves: no lost link or kill can leave it now (the switch goes with the
    # restart), but a hand, or a mur before that change, can; made here by hand, as a switch alone did
    vm.sh(f"ln -sfn releases/2 {root}/current.x && mv -Tf {root}/current.x {root}/current && "
          f"ln -sfn releases/1 {root}/previous.x && mv -Tf {root}/previous.x {root}/previous")
    # the old release still serves, `current` names the new one: the truth, never `running`
    st = js("deploy", "status", dep, home=home, check=False)
    assert st["status"] == "diverged" and st["state"]["current"] == 2 and st["state"]["serving"] == 1, st
    assert "release 1 serves while current names release 2" in st["state"]["reason"]
    # the lock went with the killed command; the next deploy of release 2 repairs it
    again = js("deploy", "-m", manifest_v2, "--id", dep, *target_args(vm), home=home)
    assert not again["unchanged"] and "release 1 was serving" in again["repaired"], again
    st = consistent(vm, home, dep)
    assert st["version"] == "0.2.0"
    # a kill -9 left the record without its history: rollback finds its release on the target
    records = json.loads((home / ".murmur" / "deployments.json").read_text())
    for r in records:
        r["previous"] = None
    (home / ".murmur" / "deployments.json").write_text(json.dumps(records))
    back = js("deploy", "rollback", dep, home=home)
    assert back["release"] == 1 and back["previous"] == 2 and back["version"] == "0.1.0"
    st = consistent(vm, home, dep)
    assert st["version"] == "0.1.0" and st["release"] == 1  # the version rolled back TO (issue 26)
    destroyed_without_trace(vm, home, dep)


def full_disk(image, tmp, home, manifest):
    vm = sshd_container(image, tmp / "small", murmur_tmpfs="120m")
    try:
        r = run("deploy", "-m", manifest, *target_args(vm, "deployer"), home=home, check=False)
        assert r.returncode == 1 and "error[E-DEPLOY-014]" in r.stderr, r.stderr
        assert "tmpfs (mounted on /home/deployer/.murmur" in r.stderr and "needed" in r.stderr
        assert murmur_files(vm, "/home/deployer")[1:] == [], murmur_files(vm, "/home/deployer")
        assert js("deploy", "ls", home=home) == []
    finally:
        vm.close()
    # big enough for the preflight, then the disk fills up while the release is uploaded
    vm = sshd_container(image, tmp / "fills", murmur_tmpfs="420m")
    try:
        d = Deploying(["deploy", "-m", manifest, *target_args(vm, "deployer")], home, env=STEADY,
                      stop_at="stage:begin")
        d.stopped()
        vm.sh("dd if=/dev/zero of=/home/deployer/.murmur/fill bs=1M 2>/dev/null; true")
        d.cont()
        rc, _out, err = d.finish()
        assert rc == 1 and "error[E-DEPLOY-014]" in err and "tmpfs (mounted on /home/deployer/.murmur" in err, err
        assert "Traceback" not in err
        vm.sh("rm -f /home/deployer/.murmur/fill")
        left = murmur_files(vm, "/home/deployer")[1:]
        assert left == [] or js("deploy", "ls", home=home), left  # nothing, or a record that says what is left
        for rec in js("deploy", "ls", home=home):
            run("deploy", "destroy", rec["deployment_id"], home=home)
        assert murmur_files(vm, "/home/deployer")[1:] == []
    finally:
        vm.close()


def crash_loop(vm, home, manifest, broken):
    first = js("deploy", "-m", manifest, *target_args(vm), home=home)
    dep = first["deployment_id"]
    root = f"/root/.murmur/deployments/{dep}"
    # the release breaks under the running service (its manifest no longer parses), then it dies
    vm.sh(f"printf 'name: [\\n' >> {root}/releases/1/murmur.yaml; "
          f"kill -9 $(sed -n 's/.*\"child_pid\": *\\([0-9]*\\).*/\\1/p' {root}/run/state.json)")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = js("deploy", "status", dep, home=home, check=False)
        if st["status"] == "crash-looping" and st["state"]["restarts"] >= 1:
            break
        time.sleep(1)
    assert st["status"] == "crash-looping" and st["state"]["last_exit"] not in (None, 0), st
    # a redeploy of the same release repairs by restarting it: it exits at once, and says so at once
    t0 = time.monotonic()
    r = run("deploy", "-m", manifest, *target_args(vm), home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-004]" in r.stderr and "remote log" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60  # not the 180 s start timeout
    assert js("deploy", "ls", home=home)[0]["status"] in ("crash-looping", "stopped")
    # a release that cannot start at all: fails at once with its log, nothing of it is left
    run("deploy", "destroy", dep, home=home)
    t0 = time.monotonic()
    r = run("deploy", "-m", broken, *target_args(vm), "--no-precompile", home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-004]" in r.stderr and "exited during startup" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 90
    assert murmur_files(vm) == [] and js("deploy", "ls", home=home) == []


def material_per_release(vm, home, manifest, broken, certs):
    first = js("deploy", "-m", manifest, *target_args(vm), "--tls", "self-signed", home=home)
    dep, pin = first["deployment_id"], first["tls_pin"]
    # a redeploy with another certificate that never starts: refused, and release 1's own material untouched
    r = run("deploy", "-m", broken, "--id", dep, *target_args(vm), "--no-precompile", "--tls-cert",
            str(certs / "cert.pem"), "--tls-key", str(certs / "key.pem"), home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-004]" in r.stderr, r.stderr
    release1 = f"/root/.murmur/deployments/{dep}/releases/1"
    mine = (home / ".murmur" / "deploy_keys" / dep / "tls-cert.pem").read_text()
    assert vm.sh(f"cat {release1}/tls/cert.pem")[1] == mine  # the refused release's certificate never got here
    assert vm.sh(f"stat -c %a {release1}/tls/key.pem")[1].strip() == "600"
    assert vm.sh(f"ls /root/.murmur/deployments/{dep}/releases")[1].split() == ["1"]
    # the serving release restarts with its own key and certificate
    run("deploy", "stop", dep, home=home)
    run("deploy", "start", dep, home=home)
    st = consistent(vm, home, dep)
    assert st["tls_pin"] == pin and st["agent_card_ok"]
    destroyed_without_trace(vm, home, dep)


# --- tests ------------------------------------------------------------------------------------------


@pytest.fixture
def vms(sshd_vm_image, tmp_path):
    made = []

    def make(name: str):
        vm = sshd_container(sshd_vm_image, tmp_path / name)
        made.append(vm)
        return vm

    yield make
    for vm in made:
        vm.close()


def homes(tmp_path: Path, *names: str) -> list[Path]:
    out = []
    for n in names:
        (tmp_path / n).mkdir()
        out.append(tmp_path / n)
    return out


@pytest.fixture(scope="module")
def variants(hello_capsule, tmp_path_factory):
    base = tmp_path_factory.mktemp("variants")
    v1 = capsule(hello_capsule, base / "v1")
    v2 = capsule(hello_capsule, base / "v2", "0.2.0")
    # a capsule that cannot start and says so at once: its only component does not compile (no
    # other component to compile first, so the runtime fails in a second, not after minutes)
    broken = base / "broken" / "murmur.yaml"
    broken.parent.mkdir()
    broken.write_text('name: hello\nversion: "0.3.0"\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n')
    (broken.parent / "capsule.wasm").write_bytes(b"\0asm this is not a component")
    certs = base / "certs"
    certs.mkdir()
    from mur.deploy.auth import _self_signed

    cert, key = _self_signed("127.0.0.1")
    (certs / "cert.pem").write_bytes(cert)
    (certs / "key.pem").write_bytes(key)
    return {"v1": str(v1), "v2": str(v2), "broken": str(broken), "certs": certs}


def test_operators_cuts_disks_crash_loops_and_material_on_parallel_targets(vms, sshd_vm_image, tmp_path,
                                                                           runtime_bundle, variants):
    h = homes(tmp_path, "ops-a", "ops-b", "cut", "disk", "loop", "tls")
    v = variants
    parallel(
        two_operators=lambda: two_operators(vms("ops"), h[0], v["v1"], h[1]),
        killed_before_the_switch_then_diverged=lambda: killed_before_the_switch_then_diverged(vms("cut"), h[2], v["v1"], v["v2"]),
        full_disk=lambda: full_disk(sshd_vm_image, tmp_path, h[3], v["v1"]),
        crash_loop=lambda: crash_loop(vms("loop"), h[4], v["v1"], v["broken"]),
        material_per_release=lambda: material_per_release(vms("tls"), h[5], v["v1"], v["broken"], v["certs"]),
    )


def test_a_silent_link_fails_naming_the_step_and_one_ctrl_c_ends_within_seconds(vms, tmp_path, runtime_bundle,
                                                                                variants):
    vm = vms("silent")
    (home,) = homes(tmp_path, "silent-home")
    manifest = variants["v1"]
    d = Deploying(["deploy", "-m", manifest, *target_args(vm)], home, stop_at="stage:begin")
    d.stopped()
    vm.container.pause()  # the host freezes: TCP stays up, nothing answers
    d.cont()
    t0 = time.monotonic()
    try:
        rc, _out, err = d.finish(timeout=120)
        took = time.monotonic() - t0
    finally:
        vm.container.unpause()
    assert rc == 1 and "error[E-DEPLOY-003]" in err and "the link went silent during upload release 1" in err, err
    assert took < float(FAST["MUR_DEPLOY_DEAD_AFTER"]) + float(FAST["MUR_DEPLOY_UNDO_BUDGET"]) + 6, took
    assert "Traceback" not in err
    # what the cut deploy left is swept by gc (nothing of this deployment ever completed there)
    swept = js("deploy", "gc", *target_args(vm), home=home)["targets"][0]
    assert swept["removed"] and not [f for f in murmur_files(vm) if "/staging" in f or "mur-tmp" in f], swept
    # the next deploy serves
    first = js("deploy", "-m", manifest, *target_args(vm), home=home)
    dep = first["deployment_id"]
    consistent(vm, home, dep)

    # one Ctrl-C while the link is silent: the command ends within the undo budget
    d = Deploying(["deploy", "-m", variants["v2"], "--id", dep, *target_args(vm)], home, stop_at="stage:begin")
    d.stopped()
    vm.container.pause()
    d.cont()
    try:
        time.sleep(0.5)
        d.proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        rc, _out, err = d.finish(timeout=120)
        took = time.monotonic() - t0
    finally:
        vm.container.unpause()
    assert rc == 130 and "Traceback" not in err, err
    assert took < float(FAST["MUR_DEPLOY_UNDO_BUDGET"]) + 4, took
    (rec,) = js("deploy", "ls", home=home)
    assert rec["status"] in ("incomplete", "running"), rec  # what is left is recorded (or nothing was)
    # release 1 kept serving throughout; the next deploy repairs whatever is left
    assert serving_release(vm, first["service_port"]) == 1
    again = js("deploy", "-m", variants["v2"], "--id", dep, *target_args(vm), home=home)
    assert again["release"] in (2, 3) and again["status"] == "running"
    consistent(vm, home, dep)
    destroyed_without_trace(vm, home, dep)
