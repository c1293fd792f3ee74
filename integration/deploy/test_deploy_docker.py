"""mur deploy --docker: a capsule image built on the local debootstrap base, one supervised container
per deployment (host network on 127.0.0.1, private cgroup namespace, writable cgroup subtree)."""

from __future__ import annotations

import json

import pytest

from pathlib import Path

from deploy_support import FORK_40, READ_OUTSIDE, ROOT, a2a_send, mur, mur_json, shell_task

pytestmark = [pytest.mark.requires_docker, pytest.mark.slow]


def send(res: dict, text: str) -> str:
    return a2a_send(res["url"], text, token=Path(res["token_file"]).read_text().strip())


def containers(client, dep_id):
    return [c.name for c in client.containers.list(all=True, filters={"label": f"dev.mur.deployment={dep_id}"})]


def test_docker_deploy_redeploy_rollback_destroy(docker_client, base_image, home, runtime_bundle, hello_capsule):
    manifest = str(hello_capsule / "murmur.yaml")
    before = {i.id for i in docker_client.images.list(filters={"label": "dev.mur.deployment"})}
    report = mur_json("deploy", "--docker", "-m", manifest, "--check", home=home)
    assert {i.id for i in docker_client.images.list(filters={"label": "dev.mur.deployment"})} == before
    assert report["ok"] and report["provider"] == "docker"
    assert report["probe"]["landlock_abi"] >= 1  # Landlock works under the engine's seccomp profile
    assert report["probe"]["cgroup_delegated"] is True  # the entrypoint's remount made the subtree writable

    first = mur_json("deploy", "--docker", "-m", manifest, home=home)
    dep = first["deployment_id"]
    assert send(first, "container") == "Hello, container!"
    assert containers(docker_client, dep) == [f"mur-{dep}"]
    c = docker_client.containers.get(f"mur-{dep}")
    host = c.attrs["HostConfig"]
    assert host["NetworkMode"] == "host" and host["CgroupnsMode"] == "private" and host["CapAdd"] == ["SYS_ADMIN"]
    assert not host["Privileged"] and host["Init"] is True
    assert host["RestartPolicy"]["Name"] == "unless-stopped"  # back after a crash, an engine restart, a reboot
    # the env file and the token are copied into the container, never into the image
    img_hist = " ".join(str(h.get("CreatedBy")) for h in docker_client.images.get(first["image"]).history())
    assert "HELLO_GREETING" not in img_hist
    tok = Path(first["token_file"]).read_text().strip()
    assert c.exec_run(["sh", "-c", f"stat -c %a /root/.murmur/deployments/{dep}/a2a-token"]).output == b"600\n"
    assert tok.encode() not in c.exec_run(["sh", "-c", "cat /proc/1/environ"]).output
    # the main process dies unexpectedly (kill -9 from the host): the restart policy brings it back
    pid = c.attrs["State"]["Pid"]
    import os
    import signal
    import time

    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if mur("deploy", "status", dep, "--json", home=home, check=False).returncode == 0:
            break
        time.sleep(1)
    assert docker_client.containers.get(f"mur-{dep}").attrs["RestartCount"] >= 1
    assert send(first, "restarted") == "Hello, restarted!"

    again = mur_json("deploy", "--docker", "-m", manifest, home=home)
    assert again["unchanged"] and again["image"] == first["image"]

    second = mur_json("deploy", "--docker", "-m", manifest, "--env", "HELLO_GREETING=Hola", home=home)
    assert second["image"] == first["image"]  # same capsule image; only the config differs
    assert send(second, "mundo") == "Hola, mundo!"
    assert sorted(containers(docker_client, dep)) == sorted([f"mur-{dep}", f"mur-{dep}-prev"])

    back = mur_json("deploy", "rollback", dep, home=home)
    assert back["status"] == "running"
    assert send(first, "again") == "Hello, again!"

    status = mur_json("deploy", "status", dep, home=home)
    assert status["status"] == "running" and status["agent_card_ok"]
    assert '"session_id"' in mur("deploy", "logs", dep, home=home).stdout
    assert any('"session_id"' in x for x in mur_json("deploy", "logs", dep, home=home)["lines"])

    mur_json("deploy", "stop", dep, home=home)
    assert docker_client.containers.get(f"mur-{dep}").status == "exited"
    mur("deploy", "destroy", dep, home=home)
    assert containers(docker_client, dep) == []
    assert docker_client.images.list(name=f"mur-capsule-{dep[4:16]}") == []
    assert mur_json("deploy", "ls", home=home) == []


def test_shell_tools_get_aggregate_limits_in_the_container(docker_client, base_image, home, runtime_bundle,
                                                           shell_capsule):
    res = mur_json("deploy", "--docker", "-m", str(shell_capsule / "murmur.yaml"),
                   "--seccomp-profile", str(ROOT / "images" / "seccomp-landlock.json"), home=home)
    try:
        forks, outside = json.loads(send(res, shell_task(FORK_40, READ_OUTSIDE)))
        # cgroup_pids_max: 12 for the whole tool tree: forks fail long before 40 sleeps
        assert "cgroup_pids_max" in forks["summary"] and "Cannot fork" in forks["data"], forks
        # and Landlock is in force: the tool cannot read files outside its grants
        assert "Permission denied" in outside["data"] and "read-ok" not in outside["data"], outside
    finally:
        mur("deploy", "destroy", res["deployment_id"], home=home)
