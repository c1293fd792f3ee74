"""The embedded default: `mur deploy` with no host deploys to this machine through the same
supervisor path a VM without systemd gets, from a clean HOME, and answers authenticated A2A."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from deploy_support import ROOT, a2a_send, mur, mur_json

pytestmark = [pytest.mark.slow]
NO_BOOT = "--no-boot-hook"  # this machine has neither systemd nor cron


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


def token(res: dict) -> str:
    return Path(res["token_file"]).read_text().strip()


def test_local_deploy_send_stop_start_destroy(home, hello_capsule):
    r = mur("deploy", "-m", str(hello_capsule / "murmur.yaml"), home=home, check=False)
    assert r.returncode == 1 and "--no-boot-hook" in r.stderr  # nothing brings it back after a reboot here
    res = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), NO_BOOT, home=home)
    dep = res["deployment_id"]
    assert res["provider"] == "local" and res["init"] == "supervisor" and res["url"].startswith("http://127.0.0.1:")
    try:
        assert a2a_send(res["url"], "local", token=token(res)) == "Hello, local!"
        assert mur("send", dep, "by id", home=home).stdout == "Hello, by id!\n"  # the token from the record
        again = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), NO_BOOT, home=home)
        assert again["unchanged"] and again["uploaded"] == 0 and again["deployment_id"] == dep
        assert mur_json("deploy", "status", dep, home=home)["agent_card_ok"]
        assert processes_of(dep)
        mur_json("deploy", "stop", dep, home=home)
        assert processes_of(dep) == []
        status = mur("deploy", "status", dep, "--json", home=home, check=False)
        assert status.returncode == 3
        mur_json("deploy", "start", dep, home=home)
        assert a2a_send(res["url"], "back", token=token(res)) == "Hello, back!"
    finally:
        mur("deploy", "destroy", dep, home=home)
    assert processes_of(dep) == []
    assert not (home / ".murmur" / "deployments").exists() and not (home / ".murmur" / "deploy_keys").exists()
    assert mur_json("deploy", "ls", home=home) == []


def test_local_deploy_with_the_pinned_bundle_and_tls(home, runtime_bundle, hello_capsule):
    res = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), "--use-bundle", NO_BOOT, "--tls", "self-signed",
                   home=home)
    try:
        link = home / ".murmur" / "deployments" / res["deployment_id"] / "current" / "mur"
        from mur import __version__
        from mur.platform import current_platform

        assert link.resolve().name == f"mur-{__version__}-{current_platform()}"  # the PyInstaller binary
        assert res["url"].startswith("https://") and len(res["tls_pin"]) == 64
        assert mur("send", res["deployment_id"], "bundle", home=home).stdout == "Hello, bundle!\n"  # pinned
        bad = mur("send", res["url"], "x", "--pin-sha256", "0" * 64, home=home, check=False)
        assert bad.returncode == 1 and "Traceback" not in bad.stderr
    finally:
        mur("deploy", "destroy", res["deployment_id"], home=home)
    assert processes_of(res["deployment_id"]) == []


@pytest.mark.requires_root
def test_env_satisfies_the_manifests_api_key_reference(home, tmp_path):
    """`api_key: ${KEY}` with KEY only in `--env`: deploy accepts it, the service resolves it on the
    target, and the provider sees exactly that key (a real driver against a loopback model server)."""
    from mur.testing.modelserver import ModelServer
    from mur.wasm.build import build_guest_dir

    cap = tmp_path / "agent"
    driver = cap / "driver"
    shutil.copytree(ROOT / "examples" / "murmur-driver-anthropic", driver,
                    ignore=shutil.ignore_patterns("*.wasm", "__pycache__", "demo"))
    build_guest_dir(driver)
    server = ModelServer([{"text": "the key worked", "usage": {"input_tokens": 5, "output_tokens": 3}}]).start()
    try:
        (cap / "murmur.yaml").write_text(f"""name: keyed
version: "0.1.0"
lifecycle:
  task_acceptance: queue
  after_task: sleep
artifacts:
  - name: murmur-driver-anthropic
    runtime: driver
    source: ./driver
    local_source: true
capabilities:
  network:
    allow: ["127.0.0.1"]
inference:
  transport: http
  endpoint: {server.url}
  model: claude-haiku-4-5
  api_key: ${{DEPLOY_TEST_KEY}}
  driver:
    artifact: murmur-driver-anthropic
""")
        env = {k: v for k, v in os.environ.items() if k != "DEPLOY_TEST_KEY"}
        r = mur("deploy", "-m", str(cap / "murmur.yaml"), NO_BOOT, home=home, check=False, env=env)
        assert r.returncode == 1 and "error[E-MAN-003]" in r.stderr and "--env DEPLOY_TEST_KEY=" in r.stderr
        res = mur_json("deploy", "-m", str(cap / "murmur.yaml"), NO_BOOT, "--env", "DEPLOY_TEST_KEY=sk-from-env-flag",
                       home=home)
        try:
            assert a2a_send(res["url"], "hi", token=token(res)) == "the key worked"
            (request,) = server.message_requests()
            assert request.headers["x-api-key"] == "sk-from-env-flag"
        finally:
            mur("deploy", "destroy", res["deployment_id"], home=home)
    finally:
        server.stop()
