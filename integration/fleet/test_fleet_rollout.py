"""A fleet as operators run one: three sshd "VMs" (testcontainers) and this machine, one deploy.yaml.

Rolled with the real CLI from a clean HOME: a first rollout everywhere, a release whose smoke task fails
on the second target (the rollout stops there and the first target goes back: every target serves the
same release), a preflight failure on one target (nothing changes anywhere), two operators at once
(one of them is refused), and the fleet-wide views and commands.
"""

from __future__ import annotations

import json
import subprocess
import sys
import os

import pytest

from deploy_support import ROOT, mur, mur_json
from fleet_support import by_target, fleet_dir, releases_on, rollout

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]


def serving(home, name="hello"):
    """{target: (version, release, status)} as `mur deploy status NAME --json` sees it (live)."""
    proc = mur("deploy", "status", name, "--json", home=home, check=False)
    return {r["target"]: (r.get("version"), r.get("release"), r.get("status"), r.get("agent_card_ok"))
            for r in json.loads(proc.stdout)}


def test_rollout_gate_stop_and_return_preflight_and_views(three_vms, home, runtime_bundle, hello_capsule, tmp_path):
    vms = three_vms
    smoke = {"smoke": {"message": "fleet", "expect": "Hello, fleet"}, "batch": 1}
    cap = fleet_dir(hello_capsule, tmp_path / "hello", vms, local=True, rollout=smoke,
                    groups={"italian": {"env": {"HELLO_GREETING": "Hello"}}},
                    target_extra={"web-2": {"groups": ["italian"]}})

    # 1. first rollout: every target, gated, one after the other
    rc, first, _ = rollout(cap, home)
    t = by_target(first)
    assert first["ok"] and set(t) == {"web-1", "web-2", "web-3", "here"}
    assert all(x["result"] == "deployed" and x["new"]["release"] == 1 for x in t.values()), first
    assert serving(home) == {n: ("0.1.0", 1, "running", True) for n in t}
    ids = [x["deployment_id"] for x in t.values()]
    assert len({i[:12] for i in ids}) == 4  # made in one minute, told apart by upstream's short form
    assert mur("send", "hello@web-2", "world", home=home).stdout == "Hello, world!\n"
    assert mur("send", "hello", "anyone", home=home).stdout == "Hello, anyone!\n"
    ls = mur("deploy", "ls", home=home).stdout
    assert "fleet hello: 0.1.0 (release 1) on all 4 target(s)" in ls

    # 2. a release whose smoke task fails on web-2: the rollout stops there, web-1 goes back to release 1
    (cap / "deploy.yaml").write_text((cap / "deploy.yaml").read_text().replace("HELLO_GREETING: Hello", "HELLO_GREETING: Ciao"))
    rc, second, err = rollout(cap, home, "--env", "RELEASE=2", check=False)
    t = by_target(second)
    assert rc == 1 and not second["ok"] and second["stopped_at"] == "web-2", err
    assert second["code"] == "E-FLEET-006" and "without 'Hello, fleet'" in t["web-2"]["error"]
    assert t["web-1"]["result"] == "rolled back" and t["web-2"]["result"] == "rolled back"
    assert t["web-3"]["result"] == "not started" and t["here"]["result"] == "not started"
    live = serving(home)
    assert {v[1] for v in live.values()} == {1} and all(v[2] == "running" and v[3] for v in live.values()), live
    assert mur("send", "hello@web-2", "again", home=home).stdout == "Hello, again!\n"

    # 3. one target cannot be reached: preflight fails, nothing changes anywhere
    before = [releases_on(vm) for vm in vms]
    vms[2].container.stop(timeout=5)
    rc, third, err = rollout(cap, home, "--env", "RELEASE=3", check=False)
    assert rc == 1 and third["code"] == "E-FLEET-005" and third["stopped_at"] == "web-3", err
    assert all(x["result"] in ("not started",) for x in third["targets"])
    assert [releases_on(vm) for vm in vms[:2]] == before[:2]
    # --skip-unreachable leaves it out and rolls the others (here, web-1, web-2) to a release that passes
    (cap / "deploy.yaml").write_text((cap / "deploy.yaml").read_text().replace("HELLO_GREETING: Ciao", "HELLO_GREETING: Hello"))
    rc, fourth, err = rollout(cap, home, "--env", "RELEASE=4", "--skip-unreachable", "--only", "web-1,web-3,here",
                              check=False)
    t = by_target(fourth)
    assert rc == 0, err
    assert t["web-3"]["result"] == "skipped" and t["web-1"]["result"] == "deployed" and t["here"]["result"] == "deployed"
    vms[2].container.start()

    # 4. fleet-wide commands and views
    logs = mur("deploy", "logs", "hello", "-n", "5", home=home).stdout
    assert {line.split(" | ")[0] for line in logs.splitlines()} >= {"hello@web-1", "hello@web-2", "hello@here"}
    stopped = mur_json("deploy", "stop", "hello", "--only", "here", home=home)
    assert [(r["target"], r["status"]) for r in stopped] == [("here", "stopped")]
    mur("deploy", "destroy", "hello", home=home)
    assert mur_json("deploy", "ls", home=home) == []
    for vm in vms[:2]:
        assert vm.sh("ls -A /root/.murmur/deployments 2>/dev/null")[1].strip() == ""


def test_two_operators_never_roll_one_fleet_at_once(three_vms, home, runtime_bundle, hello_capsule, tmp_path):
    cap = fleet_dir(hello_capsule, tmp_path / "hello", three_vms[:1], local=False)
    env = {**os.environ, "HOME": str(home)}
    argv = [sys.executable, "-m", "mur", "deploy", "--json"]
    first = subprocess.Popen(argv, cwd=cap, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import time

    time.sleep(1.5)
    second = subprocess.run(argv, cwd=cap, env=env, capture_output=True, text=True, timeout=300)
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, err
    assert second.returncode == 1 and "error[E-FLEET-004]" in second.stderr and "is being rolled" in second.stderr
    waited = subprocess.run(argv + ["--lock-wait", "600"], cwd=cap, env=env, capture_output=True, text=True, timeout=900)
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["targets"][0]["result"] == "unchanged"
    mur("deploy", "destroy", "hello", home=home)
