"""The embedded default: `mur deploy` with no host deploys to this machine through the same
supervisor path a VM without systemd gets, from a clean HOME, and answers A2A."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy_support import a2a_send, mur, mur_json

pytestmark = [pytest.mark.slow]


def processes_of(dep_id: str) -> list[str]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if dep_id in cmd and state != "Z":
            out.append(cmd)
    return out


def test_local_deploy_send_stop_start_destroy(home, hello_capsule):
    res = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), home=home)
    dep = res["deployment_id"]
    assert res["provider"] == "local" and res["init"] == "supervisor" and res["url"].startswith("http://127.0.0.1:")
    try:
        assert a2a_send(res["url"], "local") == "Hello, local!"
        again = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), home=home)
        assert again["unchanged"] and again["uploaded"] == 0 and again["deployment_id"] == dep
        assert mur_json("deploy", "status", dep, home=home)["agent_card_ok"]
        assert processes_of(dep)
        mur_json("deploy", "stop", dep, home=home)
        assert processes_of(dep) == []
        status = mur("deploy", "status", dep, "--json", home=home, check=False)
        assert status.returncode == 3
        mur_json("deploy", "start", dep, home=home)
        assert a2a_send(res["url"], "back") == "Hello, back!"
    finally:
        mur("deploy", "destroy", dep, home=home)
    assert processes_of(dep) == []
    assert not (home / ".murmur" / "deployments" / dep).exists()
    assert mur_json("deploy", "ls", home=home) == []


def test_local_deploy_with_the_pinned_bundle(home, runtime_bundle, hello_capsule):
    res = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), "--use-bundle", home=home)
    try:
        link = home / ".murmur" / "deployments" / res["deployment_id"] / "current" / "mur"
        from mur import __version__
        from mur.deploy.bundle import current_platform

        assert link.resolve().name == f"mur-{__version__}-{current_platform()}"  # the PyInstaller binary
        assert a2a_send(res["url"], "bundle") == "Hello, bundle!"
    finally:
        mur("deploy", "destroy", res["deployment_id"], home=home)
    assert processes_of(res["deployment_id"]) == []
