"""Zero downtime on this machine, as a user sees it: `mur deploy --front`, then a client sending a task
every 50 ms through the deployment's URL while a new release is deployed, a broken release is refused,
and the previous release is rolled back to. Not one request fails, every accepted task is answered,
and stop/start/destroy handle the front like the service (destroy leaves no process and no file)."""

from __future__ import annotations

import time

import pytest

from deploy_support import mur, mur_json
from front_support import Traffic

pytestmark = [pytest.mark.slow]


def test_redeploy_refused_release_and_rollback_under_traffic(home, hello_capsule, tmp_path):
    manifest = str(hello_capsule / "murmur.yaml")
    first = mur_json("deploy", "-m", manifest, "--front", "--no-boot-hook", home=home)
    dep, url = first["deployment_id"], first["url"]
    assert first["release"] == 1 and int(url.rsplit(":", 1)[1]) != first["service_port"]
    token = open(first["token_file"]).read().strip()

    traffic = Traffic(url, token).start()
    time.sleep(1.0)
    second = mur_json("deploy", "-m", manifest, "--no-boot-hook", "--env", "HELLO_GREETING=Bonjour", home=home)
    assert second["release"] == 2 and second["url"] == url and second["service_port"] == first["service_port"]

    # a release that cannot start never takes the address: its twin fails, release 2 keeps serving
    wasm = hello_capsule / "capsule.wasm"
    good = wasm.read_bytes()
    wasm.write_bytes(b"\0asm\x01\0\0\0not a component")
    try:
        bad = mur("deploy", "-m", manifest, "--no-boot-hook", "--env", "HELLO_GREETING=Bonjour",
                  "--start-timeout", "30", home=home, check=False)
    finally:
        wasm.write_bytes(good)
    assert bad.returncode == 1 and "error[E-DEPLOY-004]" in bad.stderr and "beside the serving one" in bad.stderr
    assert mur_json("deploy", "status", dep, home=home)["release"] == 2
    time.sleep(0.5)
    back = mur_json("deploy", "rollback", dep, home=home)
    assert back["release"] == 1
    time.sleep(1.0)
    traffic.stop()

    assert traffic.failures == []
    assert len(traffic.answers) == len(traffic.sent) > 40
    said = [a.split(",")[0] for a in traffic.answers.values()]
    assert "Hello" in said and "Bonjour" in said
    assert mur("send", dep, "again", home=home).stdout == "Hello, again!\n"

    status = mur_json("deploy", "status", dep, home=home)
    assert status["status"] == "running" and status["front"]["alive"]
    assert [b["name"] for b in status["front"]["backends"]] == ["release-1"]
    stopped = mur_json("deploy", "stop", dep, home=home)
    assert stopped["status"] == "stopped"
    assert mur("send", dep, "x", home=home, check=False).returncode == 1  # the address is closed
    started = mur_json("deploy", "start", dep, home=home)
    assert started["status"] == "running"
    assert mur("send", dep, "back", home=home).stdout == "Hello, back!\n"
    mur("deploy", "destroy", dep, home=home)
    assert not (home / ".murmur" / "deployments" / dep).exists()
    import subprocess

    procs = subprocess.run(["pgrep", "-af", f"{dep}"], capture_output=True, text=True).stdout
    assert procs.strip() == "", procs
