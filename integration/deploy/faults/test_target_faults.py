"""The target misbehaves: it restarts (power loss or a clean reboot) while serving and while a deploy
runs, its service is killed mid-deploy, its disk is too small or fills up, a release crash-loops or
exits at once, keys change (TLS material on redeploy, the SSH host key), the operator's clock is off.

After each: status tells the truth, exactly one consistent release serves (or it is cleanly
stopped), the next deploy repairs, destroy leaves nothing."""

from __future__ import annotations

import datetime
import json
import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest

from fault_harness import (
    LOCK_ERROR, SILENT_BOUND, Box, Lane, Seed, check_consistent, check_nothing_left, check_truthful,
    expect_failure, no_traceback, scenario, truth,
)
from deploy_support import wait_for_ssh

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]


def wait_status(lane: Lane, wanted: tuple[str, ...] = ("running",), timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        rec = lane.op.json("deploy", "status", lane.dep, check=False)  # type: ignore[arg-type]
        if rec.get("status") in wanted or time.monotonic() > deadline:  # type: ignore[union-attr]
            return rec  # type: ignore[return-value]
        time.sleep(1)


def service_pids(box: Box, dep: str) -> dict[str, list[str]]:
    """Pids of the deployment's supervisor and service (`mur run`) on the target."""
    out = box.out("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
                  "[ -n \"$c\" ] && echo \"${p#/proc/} $c\"; done")
    pids: dict[str, list[str]] = {"supervisor": [], "child": []}
    for line in out.splitlines():
        pid, _, cmd = line.partition(" ")
        if dep not in cmd:
            continue
        if "supervise run" in cmd:
            pids["supervisor"].append(pid)
        elif " run --manifest" in cmd:
            pids["child"].append(pid)
    return pids


@scenario(cost=30, seeds=1)
def test_target_restart_while_serving(lane: Lane, s: Seed) -> None:
    unclean = s.pick([True, False])
    lane.notes.append(f"{'unclean' if unclean else 'clean'} restart while serving")
    lane.box.restart(unclean=unclean)
    wait_status(lane)
    lane.check(expect=lane.greeting, settle=3)
    res = lane.deploy(lane.greeting, *lane.extra)
    assert res["unchanged"], res
    lane.check(expect=lane.greeting)


@scenario(cost=50)
def test_target_restart_while_deploying(lane: Lane, s: Seed) -> None:
    old = lane.greeting
    old_n = truth(lane.box, lane.op, lane.dep).current  # type: ignore[arg-type]
    point = s.pick([r"· upload release", r"· smoke-start", r"· start release"])
    delay, down = s.rng.uniform(0, 1.5), s.rng.uniform(0, 2)
    greeting = lane.next_greeting()
    run = lane.op.spawn(*lane.deploy_args(greeting))

    def power_off() -> None:
        run.signalled_at = time.monotonic()
        lane.box.vm.container.kill()

    run.on(point, power_off, delay=delay)
    lane.notes.append(f"power off {delay:.2f}s after {point!r}, back {down:.1f}s later; new greeting {greeting}")
    rc = run.finish(timeout=SILENT_BOUND + 120)
    lane.box.vm.container.wait(timeout=30)
    time.sleep(down)
    lane.box.vm.container.start()
    wait_for_ssh(lane.box.vm.port)
    expect_failure(run, rc, bound=SILENT_BOUND, allow_success=True, codes=("E-DEPLOY-003", "E-DEPLOY-004"))
    wait_status(lane, ("running", "crash-looping", "stopped", "diverged", "incomplete", "failed"), timeout=60)
    time.sleep(3)  # cron @reboot brings the supervisor back
    check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
    lane.repair(greeting)
    back = lane.op.json("deploy", "rollback", lane.dep)  # type: ignore[arg-type]
    assert back["release"] == old_n, back
    lane.greeting = old
    lane.check(expect=old)


@scenario(cost=30, seeds=1)
def test_the_service_is_killed_while_deploying(lane: Lane, s: Seed) -> None:
    which = s.pick(["child", "supervisor", "both"])
    point = s.pick([r"· upload release", r"· smoke-start", r"· start release"])
    delay = s.rng.uniform(0, 1.5)
    greeting = lane.next_greeting()
    run = lane.op.spawn(*lane.deploy_args(greeting))

    def kill() -> None:
        pids = service_pids(lane.box, lane.dep)  # type: ignore[arg-type]
        victims = pids["child"] if which == "child" else pids["supervisor"] if which == "supervisor" else \
            pids["supervisor"] + pids["child"]
        if victims:
            lane.box.sh(f"kill -9 {' '.join(victims)}")
        lane.notes.append(f"killed {which} {victims}")

    run.on(point, kill, delay=delay)
    lane.notes.append(f"kill -9 of the {which} {delay:.2f}s after {point!r}; new greeting {greeting}")
    rc = run.finish(timeout=300)
    expect_failure(run, rc, allow_success=True, codes=("E-DEPLOY-003", "E-DEPLOY-004"))
    time.sleep(3)
    check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
    lane.repair(greeting)


# --- disk ----------------------------------------------------------------------------------------


def names_the_filesystem(text: str, home: str) -> None:
    err = "\n".join(ln for ln in text.splitlines() if ln.startswith("error[") or ln.startswith("  "))
    assert re.search(r"no space|not enough (disk|space)|disk full|free", err, re.I), f"not a disk error:\n{text[-2000:]}"
    assert home in err or "tmpfs" in err, f"the error does not name the filesystem ({home}):\n{text[-2000:]}"
    assert re.search(r"\d+(\.\d+)? ?(bytes|B|KiB|MiB|GiB|KB|MB|GB)\b", err), f"the error names no size needed:\n{text[-2000:]}"


@scenario(shared=False, serving=False, user="deployer", home_size=("80m", "200m"), cost=15)
def test_a_home_too_small_for_a_first_deploy(lane: Lane, s: Seed) -> None:
    res = lane.op.mur(*lane.deploy_args(lane.next_greeting()), check=False)
    no_traceback(res.stderr)
    assert res.returncode == 1 and re.search(r"error\[E-DEPLOY-\d+\]", res.stderr), res.stderr[-2000:]
    names_the_filesystem(res.stderr, lane.box.home)
    assert lane.op.records() == []
    assert not lane.box.out(f"ls -A {lane.box.home}/.murmur/deployments 2>/dev/null").strip()
    left = lane.box.out(f"find {lane.box.home}/.murmur -xdev \\( -name '*mur-tmp*' -o -name '*.part' \\) 2>/dev/null")
    assert not left.strip(), f"partial uploads left: {left}"
    assert not lane.box.mur_procs(), lane.box.mur_procs()

# two sizes (not even the runtime unpacked; the runtime but not the release), a target each


@scenario(shared=False, user="deployer", home_size="700m", cost=50, seeds=1)
def test_the_disk_fills_during_a_redeploy(lane: Lane, s: Seed) -> None:
    old = lane.greeting
    stage = s.pick([r"· upload release", r"· smoke-start", r"· start release"])
    seed_dir, size = lane.seed_dir(s.rng, (3, 6))
    leave = s.rng.randrange(0, 2 << 20) if "upload" in stage else s.rng.randrange(0, 128 << 10)
    home = lane.box.home
    filler = f"{home}/.filler"
    greeting = lane.next_greeting()
    run = lane.op.spawn(*lane.deploy_args(greeting, "--workdir", str(seed_dir)))

    def fill() -> None:
        avail = int(lane.box.out(f"df -B1 --output=avail {home} | tail -1").strip())
        lane.box.sh(f"fallocate -l {max(avail - leave, 1)} {filler}")
        lane.notes.append(f"filled: {avail - leave} of {avail} free bytes")

    run.on(stage, fill)
    lane.notes.append(f"disk fills at {stage!r} leaving {leave} bytes; new greeting {greeting}")
    rc = run.finish(timeout=300)
    failed = expect_failure(run, rc, allow_success="upload" not in stage,
                            codes=("E-DEPLOY-014", "E-DEPLOY-004", "E-DEPLOY-003"))
    if failed and "upload" in stage:
        names_the_filesystem(run.stderr, home)
        lane.check(expect=old)
    else:
        check_truthful(lane.box, lane.op, lane.dep)  # type: ignore[arg-type]
    lane.box.sh(f"rm -f {filler}")
    lane.deploy(greeting, "--workdir", str(seed_dir))
    lane.check(expect=greeting)


# --- releases that do not run -------------------------------------------------------------------


@scenario(seeds=1, cost=40)
def test_a_crash_looping_release_is_reported_and_repaired(lane: Lane, s: Seed) -> None:
    root = lane.box.dep_root(lane.dep)  # type: ignore[arg-type]
    n = truth(lane.box, lane.op, lane.dep).current  # type: ignore[arg-type]
    # The release's manifest goes bad on disk (replaced, not edited: releases share hard links),
    # then the service dies: every restart now exits at once.
    m = f"{root}/releases/{n}/murmur.yaml"
    lane.box.sh(f"cp {m} {m}.x && printf 'capabilities: [\\n' >> {m}.x && mv {m}.x {m}")
    pids = service_pids(lane.box, lane.dep)  # type: ignore[arg-type]
    lane.box.sh(f"kill -9 {' '.join(pids['child'])}")
    time.sleep(s.rng.uniform(5, 8))
    proc = lane.op.mur("deploy", "status", lane.dep, "--json", check=False)  # type: ignore[arg-type]
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec["status"] == "crash-looping" and proc.returncode == 3, \
        f"status {rec.get('status')!r} (exit {proc.returncode}) for a crash-looping service: {rec.get('service')}"
    st = {**(rec.get("service") or {}), **(rec.get("state") or {})}
    assert int(st.get("restarts") or 0) >= 1 and str(st.get("last_exit", "")) not in ("", "None", "0"), \
        f"no restart count and last exit: {st}"
    # the same deploy again must not say "unchanged" while nothing answers
    res = lane.op.mur(*lane.deploy_args(lane.greeting, *lane.extra), check=False)  # type: ignore[arg-type]
    no_traceback(res.stderr)
    if res.returncode == 0:
        lane.check(expect=lane.greeting)
    else:
        assert re.search(r"error\[E-DEPLOY-\d+\]", res.stderr), res.stderr[-2000:]
        after = lane.op.json("deploy", "status", lane.dep, check=False)  # type: ignore[arg-type]
        assert after["status"] in ("crash-looping", "stopped"), after  # type: ignore[index]
    lane.repair(lane.next_greeting())


@scenario(shared=False, serving=False, seeds=1, cost=40)
def test_a_release_whose_process_exits_fails_at_once(lane: Lane, s: Seed) -> None:
    """A first deploy whose service exits at start (a component that cannot compile on the target):
    E-DEPLOY-004 with the last log lines, long before --start-timeout, and nothing left."""
    cap = lane.workdir / f"broken-{s.seed}"
    shutil.copytree(Path(lane.manifest).parent, cap)
    (cap / "capsule.wasm").write_bytes(b"\0asm not really a component" + s.rng.randbytes(64))
    run = lane.op.spawn("deploy", "-m", str(cap / "murmur.yaml"), *lane.box.args(), "--no-precompile",
                        "--start-timeout", "170")
    rc = run.finish(timeout=400)
    no_traceback(run.stderr)
    assert rc == 1 and "error[E-DEPLOY-004]" in run.stderr, run.stderr[-2000:]
    started = next((t for t, line in run.lines if line.startswith("· start release")), None)
    failed = next((t for t, line in run.lines if line.startswith("✗ start release")), None)
    assert started is not None and failed is not None, run.stderr[-2000:]
    log = run.stderr.partition("remote log:")[2].rpartition("\n  hint:")[0]  # the service's own lines may hold hints
    assert log.strip(), f"E-DEPLOY-004 without the service's last log lines:\n{run.stderr[-2000:]}"
    # "fails at once": measured from the service's own exit (its log's timestamp, the target's clock
    # is this machine's), since starting the runtime at all may take long on a loaded machine
    exited = re.search(r"\[mur supervise (\S+)\] service exited", log)
    assert exited, f"the log does not show the exit:\n{log[-1500:]}"
    exit_at = datetime.datetime.fromisoformat(exited.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
    noticed = run.wall0 + failed - exit_at
    assert noticed < 15, f"the service exited {noticed:.0f}s before the deploy gave up (--start-timeout 170)"
    assert failed - started < 120, f"the start step took {failed - started:.0f}s (--start-timeout 170)"
    assert lane.op.records() == []
    check_nothing_left(lane.box)


# --- keys and clocks -----------------------------------------------------------------------------


def make_cert(d: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key (PEM files)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    d.mkdir(parents=True, exist_ok=True)
    crt, pem = d / f"{name}.crt", d / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    pem.chmod(0o600)
    return crt, pem


@scenario(shared=False, serving=False, seeds=1, cost=120)
def test_key_changes(lane: Lane, s: Seed) -> None:
    """TLS: a redeploy with a key that does not match its certificate is refused and the serving
    release keeps its own material (it still starts after a restart); a real key change serves
    with the new pin, and rollback serves the old release with its old certificate. SSH: a
    target whose host key changed is refused before anything changes."""
    keys = lane.workdir / f"keys-{s.seed}"
    (a_crt, a_key), (b_crt, b_key) = make_cert(keys, "a"), make_cert(keys, "b")
    g1 = lane.next_greeting()
    first = lane.deploy(g1, "--tls-cert", str(a_crt), "--tls-key", str(a_key))
    pin_a = first["tls_pin"]
    lane.check(expect=g1)
    bad = lane.op.mur(*lane.deploy_args(lane.next_greeting(), "--tls-cert", str(a_crt), "--tls-key", str(b_key)),
                      check=False)
    no_traceback(bad.stderr)
    assert bad.returncode == 1 and re.search(r"error\[E-[A-Z]+-\d+\]", bad.stderr), bad.stderr[-2000:]
    lane.check(expect=g1)
    # the serving release still starts with its own key and certificate
    lane.box.sh(f"kill -9 {' '.join(service_pids(lane.box, lane.dep)['child'])}")  # type: ignore[arg-type]
    time.sleep(4)
    lane.check(expect=g1, settle=5)
    g3 = lane.next_greeting()
    third = lane.deploy(g3, "--tls-cert", str(b_crt), "--tls-key", str(b_key))
    assert third["tls_pin"] != pin_a
    lane.check(expect=g3)
    back = lane.op.json("deploy", "rollback", lane.dep)  # type: ignore[arg-type]
    assert back["tls_pin"] == pin_a, f"after rollback the record pins {back['tls_pin']}, the release serves {pin_a}"
    lane.greeting = g1
    lane.check(expect=g1)
    # the SSH host key changes (another machine answers on the same address): refused, nothing changes
    other = Box.start(lane.box.vm.tc.image, lane.workdir / f"other-{s.seed}")
    try:
        lane.box.relay.upstream = ("127.0.0.1", other.vm.port)
        lane.box.relay.cut()
        res = lane.op.mur(*lane.deploy_args(lane.next_greeting()), check=False)
        no_traceback(res.stderr)
        assert res.returncode == 1 and "error[E-DEPLOY-009]" in res.stderr, res.stderr[-2000:]
        assert not other.out("ls -A /root/.murmur 2>/dev/null").strip()
    finally:
        lane.box.relay.upstream = ("127.0.0.1", lane.box.vm.port)
        other.close()
    lane.check(expect=g1)


SKEW = textwrap.dedent('''
    """Test shim: this process's wall clock is off by MUR_FAULTS_SKEW seconds (monotonic time is not)."""
    import datetime as _dt
    import os as _os
    import time as _time

    _skew = float(_os.environ.get("MUR_FAULTS_SKEW", "0"))
    _time_time, _time_ns = _time.time, _time.time_ns
    _time.time = lambda: _time_time() + _skew
    _time.time_ns = lambda: _time_ns() + int(_skew * 1e9)


    class _Skewed(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return super().now(tz) + _dt.timedelta(seconds=_skew)

        @classmethod
        def utcnow(cls):
            return super().utcnow() + _dt.timedelta(seconds=_skew)

        @classmethod
        def today(cls):
            return cls.now()


    _dt.datetime = _Skewed
''')


@scenario(seeds=1, cost=35)
def test_operators_with_skewed_clocks(lane: Lane, s: Seed) -> None:
    """The operators' wall clocks are off (hours to days, either way): a live lock holder is never
    taken for a stale one, and records, status and rollback stay consistent."""
    shim = lane.workdir / "skew"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(SKEW)
    skew_a = s.rng.choice([-1, 1]) * s.rng.uniform(3600, 3 * 86400)
    env_a = {"PYTHONPATH": str(shim), "MUR_FAULTS_SKEW": str(skew_a)}
    env_b = {"PYTHONPATH": str(shim), "MUR_FAULTS_SKEW": str(-skew_a)}
    old = lane.greeting
    g_a, g_b = lane.next_greeting(), lane.next_greeting()
    run_a = lane.op.spawn(*lane.deploy_args(g_a), env=env_a)
    runs = {}
    run_a.on(r"· upload release", lambda: runs.setdefault("b", lane.op.spawn(*lane.deploy_args(g_b), env=env_b)))
    lane.notes.append(f"A's clock {skew_a / 3600:+.1f}h, B's {-skew_a / 3600:+.1f}h")
    rc_a = run_a.finish(timeout=300)
    rc_b = runs["b"].finish(timeout=300)
    assert rc_a == 0 and rc_b == 1, f"A exit {rc_a}, B exit {rc_b}:\nB:\n{runs['b'].stderr[-2000:]}"
    assert LOCK_ERROR.search(runs["b"].stderr), runs["b"].stderr[-2000:]
    lane.greeting = g_a
    lane.check(expect=g_a)
    skewed = lane.operator(lane.op.home, env_b)
    back = skewed.json("deploy", "rollback", lane.dep)  # type: ignore[arg-type]
    assert back["status"] == "running", back
    lane.greeting = old
    check_consistent(lane.box, skewed, lane.dep, expect=old)  # type: ignore[arg-type]


