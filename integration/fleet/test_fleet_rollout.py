"""A fleet as operators run one: three sshd "VMs" (testcontainers) and this machine, one deploy.yaml.

Rolled with the real CLI from a clean HOME: a first rollout everywhere; clients sending a task every
50 ms through a rolling redeploy (three other operators trying to roll the same fleet meanwhile) and
through a release whose smoke task fails on the second target (the rollout stops there and the first
target goes back): not one request fails and every target serves the same release; a preflight failure
on one target (nothing changes anywhere); the fleet-wide views and commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from deploy_support import mur, mur_json
from fleet_support import by_target, fleet_dir, releases_on, rollout
from front_support import Traffic

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]
# a stopped target refuses at once; without these, connecting to it retries for 30 s (mur.deploy.deadlines)
QUICK_LINK = {"MUR_DEPLOY_CONNECT_BUDGET": "3", "MUR_DEPLOY_CONNECT_TIMEOUT": "2"}


def operator(cap, home, *args):
    """`mur deploy --json ARGS` started in the background, as another operator would."""
    return subprocess.Popen([sys.executable, "-m", "mur", "deploy", "--json", *args], cwd=cap,
                            env={**os.environ, "HOME": str(home)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def serving(home, name="hello"):
    """{target: (version, release, status)} as `mur deploy status NAME --json` sees it (live)."""
    proc = mur("deploy", "status", name, "--json", home=home, check=False)
    return {r["target"]: (r.get("version"), r.get("release"), r.get("status"), r.get("agent_card_ok"))
            for r in json.loads(proc.stdout)}


def test_rolling_under_traffic_gate_stop_preflight_and_views(three_vms, home, runtime_bundle, hello_capsule, tmp_path):
    vms = three_vms
    smoke = {"smoke": {"message": "fleet", "expect": "Hello, fleet"}, "batch": 1}
    cap = fleet_dir(hello_capsule, tmp_path / "hello", vms, local=True, rollout=smoke,
                    groups={"italian": {"env": {"HELLO_GREETING": "Hello"}}},
                    target_extra={"web-2": {"groups": ["italian"]}})

    # 1. first rollout: every target at once, each gated on its health and the smoke task
    rc, first, _ = rollout(cap, home, "--batch", "100%")
    t = by_target(first)
    assert first["ok"] and set(t) == {"web-1", "web-2", "web-3", "here"}
    assert all(x["result"] == "deployed" and x["new"]["release"] == 1 for x in t.values()), first
    assert serving(home) == {n: ("0.1.0", 1, "running", True) for n in t}
    ids = [x["deployment_id"] for x in t.values()]
    assert len({i[:12] for i in ids}) == 4  # made in one minute, told apart by upstream's short form
    assert mur("send", "hello@web-2", "world", home=home).stdout == "Hello, world!\n"
    assert mur("send", "hello", "anyone", home=home).stdout == "Hello, anyone!\n"
    assert "fleet hello: 0.1.0 (release 1) on all 4 target(s)" in mur("deploy", "ls", home=home).stdout

    # 2. clients on web-1 and web-2, a task every 50 ms each, through a rolling redeploy (and the failed
    #    one below). Meanwhile two other operators try to roll the same fleet: one from another machine
    #    (another HOME: refused by the fleet's lock on the targets), one from this one (refused by this
    #    machine's lock); a third waits its turn with --lock-wait and finds nothing to do.
    records = {r["fleet"]["target"]: r for r in mur_json("deploy", "ls", home=home)}
    clients = {n: Traffic(records[n]["url"], open(records[n]["token_file"]).read().strip()).start()
               for n in ("web-1", "web-2")}
    args = ["--env", "RELEASE=2", "--batch", "2"]
    rolling = operator(cap, home, *args)
    # the holder file stays after a release (it names who last held the lock): wait for this operator's pid
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and f'"pid": {rolling.pid},' not in vms[0].sh(
            "cat /root/.murmur/locks/fleet-hello.holder")[1]:
        time.sleep(0.2)
    assert rolling.poll() is None, rolling.communicate()
    other = tmp_path / "other-home"
    other.mkdir()
    b = operator(cap, other, *args).communicate(timeout=300)
    a2 = operator(cap, home, *args).communicate(timeout=300)
    waiting = operator(cap, home, *args, "--lock-wait", "900")
    out, err = rolling.communicate(timeout=900)
    second = json.loads(out)
    assert rolling.returncode == 0, err + out  # the JSON names what failed
    assert all(x["result"] == "deployed" and x["new"]["release"] == 2 for x in second["targets"]), second
    assert "error[E-FLEET-004]" in b[1] and "is being rolled" in b[1] and "mur deploy" in b[1], b[1]
    assert "error[E-FLEET-004]" in a2[1] and "from this machine" in a2[1], a2[1]
    out, err = waiting.communicate(timeout=900)
    assert waiting.returncode == 0, err
    assert {x["result"] for x in json.loads(out)["targets"]} == {"unchanged"}, out

    # 3. a release whose smoke task fails on web-2: it never takes web-2's address, the rollout stops
    #    there, and web-1 (already switched) goes back to release 2
    (cap / "deploy.yaml").write_text((cap / "deploy.yaml").read_text().replace("HELLO_GREETING: Hello", "HELLO_GREETING: Ciao"))
    rc, third, err = rollout(cap, home, "--env", "RELEASE=3", "--only", "web-1,web-2,web-3", check=False)
    t = by_target(third)
    assert rc == 1 and not third["ok"] and third["stopped_at"] == "web-2", err
    assert third["code"] == "E-FLEET-006" and "without 'Hello, fleet'" in t["web-2"]["error"]
    assert "error[E-FLEET-006]: the rollout stopped at web-2" in err and "\n  hint: " in err, err  # stderr says why
    assert t["web-1"]["result"] == "rolled back" and t["web-1"]["new"]["release"] == 2
    assert t["web-2"]["result"] == "failed" and t["web-3"]["result"] == "not started"
    assert third["left_out"] == ["here"]
    time.sleep(1.0)
    for c in clients.values():
        c.stop()
    for name, c in clients.items():
        assert c.failures == [], (name, c.failures[:5])
        assert len(c.answers) == len(c.sent) > 20, name  # every accepted task answered
    live = serving(home)
    assert {v[1] for v in live.values()} == {2} and all(v[2] == "running" and v[3] for v in live.values()), live

    # 4. one target cannot be reached: preflight fails, nothing changes anywhere
    before = [releases_on(vm) for vm in vms]
    vms[2].container.stop(timeout=5)
    rc, fourth, err = rollout(cap, home, "--env", "RELEASE=4", check=False, env=QUICK_LINK)
    assert rc == 1 and fourth["code"] == "E-FLEET-005" and fourth["stopped_at"] == "web-3", err
    assert all(x["result"] == "not started" for x in fourth["targets"])
    assert [releases_on(vm) for vm in vms[:2]] == before[:2]
    # --skip-unreachable leaves it out and rolls the others it selects
    (cap / "deploy.yaml").write_text((cap / "deploy.yaml").read_text().replace("HELLO_GREETING: Ciao", "HELLO_GREETING: Hello"))
    rc, fifth, err = rollout(cap, home, "--env", "RELEASE=5", "--skip-unreachable", "--only", "web-3,here", check=False,
                             env=QUICK_LINK)
    t = by_target(fifth)
    assert rc == 0 and t["web-3"]["result"] == "skipped" and t["here"]["result"] == "deployed", err
    vms[2].container.start()

    # 5. what a client of web-1 reaches is its front: with the front killed, `mur send` (through its own
    #    SSH forward) gets no answer, as every other client would, and status says why; `start` mends it.
    #    (It used to forward to the service's private port, which restarts at every release switch.)
    vms[0].sh("for p in /proc/[0-9]*; do [ \"${p#/proc/}\" = $$ ] && continue; "  # not this shell: its line matches
              "case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in *' front run '*) kill -9 ${p#/proc/};; esac; done")
    sent = mur("send", "hello@web-1", "anyone", home=home, check=False)
    assert sent.returncode == 1 and "error[E-A2A-001]: hello@web-1: cannot reach the capsule" in sent.stderr, sent.stderr
    status = mur_json("deploy", "status", "hello@web-1", home=home, check=False)
    assert status["status"] == "diverged" and "the front" in status["state"]["reason"], status
    mur("deploy", "start", "hello@web-1", home=home)
    assert mur("send", "hello@web-1", "again", home=home).stdout == "Hello, again!\n"

    # 6. fleet-wide commands and views
    logs = mur("deploy", "logs", "hello", "-n", "5", home=home).stdout
    assert {line.split(" | ")[0] for line in logs.splitlines()} >= {"hello@web-1", "hello@web-2", "hello@here"}
    stopped = mur_json("deploy", "stop", "hello", "--only", "here", home=home)
    assert [(r["target"], r["status"]) for r in stopped] == [("here", "stopped")]
    mur("deploy", "destroy", "hello", home=home)
    assert mur_json("deploy", "ls", home=home) == []
    for vm in vms[:2]:
        assert vm.sh("ls -A /root/.murmur/deployments 2>/dev/null")[1].strip() == ""
        assert not [p for p in vm.procs() if "mur" in p], vm.procs()
