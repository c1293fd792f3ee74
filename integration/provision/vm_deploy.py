"""What the provisioning VM tests share: reaching a VM's deployment, deploying the shell capsule on
it as a given user, and the kernel matrix's row (.ci/run prints the rows)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from deploy_support import FORK_40, READ_OUTSIDE, a2a_send, mur, mur_json, refused_outside, shell_task
from vm_suite import record

TIMEOUT = ["--start-timeout", "900"]


def tunnel_send(machine, home: Path, port: int, text: str, user: str, token: str | None = None) -> str:
    os.environ["HOME"] = str(home)
    from mur.deploy.targets.ssh import SSHTarget

    key = machine.root_key if user == "root" else machine.key
    t = SSHTarget("127.0.0.1", user=user, port=machine.port, key_file=str(key), known_hosts=str(machine.known_hosts))
    try:
        with t.forward(port) as fw:
            return a2a_send(fw.url, text, timeout=900, token=token)
    finally:
        t.close()


def deploy_args(machine, user: str) -> list[str]:
    key = machine.root_key if user == "root" else machine.key
    return ["--host", "127.0.0.1", "--ssh-port", str(machine.port), "--ssh-user", user, "--ssh-key", str(key),
            "--known-hosts", str(machine.known_hosts)]


def matrix_row(kernel: str, machine, suite: dict, deployed: bool) -> None:
    row = {"kernel": kernel, "release": machine.extra.get("kernel_release"), "landlock_abi": suite["abi"],
           "escape_passed": suite["passed"], "escape_failed": suite["failed"], "failed_names": suite["failed_names"],
           "flaky": suite["flaky"], "deploy": deployed}
    record(row)
    print(f"\n[kernel-matrix] {json.dumps(row)}")


def shell_deploy_answers(machine, home, shell_capsule, user: str) -> dict:
    """Preflight + deploy of the shell capsule as `user`; a task forking past the pids bound."""
    report = mur_json("deploy", "-m", str(shell_capsule / "murmur.yaml"), *deploy_args(machine, user), "--check",
                      home=home, timeout=1800)
    assert report["ok"], report
    checks = {c["name"]: c for c in report["checks"]}
    assert report["cgroup_mode"] == "unified" and checks["shell limits"]["ok"], checks
    # a prepared host: deploy elevates through the root helper only (its sudoers rule allows no shell)
    assert report["uid"] != 0 and report["sudo"] == "helper" and report["init"] == "systemd"
    res = mur_json("deploy", "-m", str(shell_capsule / "murmur.yaml"), *deploy_args(machine, user), *TIMEOUT,
                   home=home, timeout=2400)
    forks, outside = json.loads(tunnel_send(machine, home, res["service_port"], shell_task(FORK_40, READ_OUTSIDE),
                                             user, Path(res["token_file"]).read_text().strip()))
    assert "cgroup_pids_max" in forks["summary"] and "Cannot fork" in forks["data"], forks
    assert refused_outside(outside["data"]), outside
    mur("deploy", "destroy", res["deployment_id"], home=home, timeout=600)
    return report
