"""`mur image build`: reproducible (same inputs, same image ID; one byte changed, another ID), labelled,
non-root, and it serves A2A under a plain `docker run`."""

from __future__ import annotations

import json

import pytest

from image_support import RUN, copy_capsule, free_port, mur, mur_json, wait_for, agent_card

pytestmark = [pytest.mark.requires_docker, pytest.mark.slow]


def test_rebuild_from_nothing_gives_the_same_id_and_one_byte_another(docker_client, hello_image, mur_env, hello,
                                                                      tmp_path):
    first = hello_image
    # the export tests' session fixture may have built the same inputs already: this build may be a retag
    assert first["id"].startswith("sha256:")
    # the engine forgets the image entirely: the rebuild recreates it, byte for byte
    docker_client.images.remove(first["id"], force=True)
    again = mur_json("image", "build", "-m", str(hello / "murmur.yaml"), "-t", first["tag"], env=mur_env)
    assert again["id"] == first["id"] and not again["unchanged"]
    assert again["layer"] == first["layer"]
    # built once more while the engine has it: nothing is loaded, only tagged
    third = mur_json("image", "build", "-m", str(hello / "murmur.yaml"), "-t", f"{RUN}/hello:third", env=mur_env)
    assert third["id"] == first["id"] and third["unchanged"]
    # one byte of one capsule file
    other = copy_capsule(hello, tmp_path / "hello")
    text = (other / "murmur.yaml").read_bytes()
    (other / "murmur.yaml").write_bytes(text.replace(b"A plain tool capsule", b"A plain tool capsulE", 1))
    changed = mur_json("image", "build", "-m", str(other / "murmur.yaml"), "-t", f"{RUN}/hello:changed", env=mur_env)
    assert changed["id"] != first["id"] and changed["layer"]["diff_id"] != first["layer"]["diff_id"]
    assert changed["capsule"]["digest"] != first["capsule"]["digest"]


def test_the_fallback_archive_with_every_layer_gives_the_same_image(docker_client, hello_image, mur_env, hello,
                                                                      monkeypatch):
    """Engines that need every blob (containerd's image store) get the base layers too: same ID."""
    from mur.deploy.capsule import gather
    from mur.image import BuildOptions, build_image

    for key in ("HOME", "MUR_BUNDLE_CACHE", "MUR_CACHE_DIR"):
        monkeypatch.setenv(key, mur_env[key])
    docker_client.images.remove(hello_image["id"], force=True)
    res = build_image(gather(hello / "murmur.yaml"), hello_image["tag"], options=BuildOptions(full_archive=True))
    assert res.image.id == hello_image["id"] and not res.unchanged


def test_labels_user_healthcheck_and_layout(docker_client, hello_image):
    img = docker_client.images.get(hello_image["id"])
    cfg = img.attrs["Config"]
    labels = cfg["Labels"]
    assert labels["org.opencontainers.image.title"] == "hello" and labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["dev.mur.capsule.digest"] == hello_image["capsule"]["digest"]
    assert labels["dev.mur.mur_version"] == hello_image["runtime"]["version"]
    assert labels["dev.mur.lock.digest"] == "none"  # hello has local-source artifacts only
    assert cfg["User"] == "10001:10001" and cfg["Entrypoint"] == ["/usr/local/bin/mur-serve"]
    assert cfg["Healthcheck"]["Test"] == ["CMD", "/usr/local/bin/mur-healthcheck"]
    assert img.attrs["RootFS"]["Layers"][-1] == hello_image["layer"]["diff_id"]
    out = docker_client.containers.run(
        hello_image["id"], entrypoint=["/bin/sh", "-c"], network_mode="none", remove=True,
        command=["stat -c '%u %a %n' /capsule/murmur.yaml /workdir /home/mur/.murmur/cache/wasm "
                 "/home/mur/.murmur/cache/wasm/*.cwasm /usr/local/bin/mur-serve; id -un"]).decode()
    lines = out.strip().splitlines()
    assert lines[0] == "0 644 /capsule/murmur.yaml" and lines[1] == "10001 700 /workdir"
    assert lines[2] == "10001 700 /home/mur/.murmur/cache/wasm"
    cwasm = [ln for ln in lines if ln.endswith(".cwasm")]
    assert len(cwasm) == hello_image["precompiled"] == 2 and all(ln.startswith("10001 600 ") for ln in cwasm)
    assert lines[-1] == "mur"


def test_a_plain_docker_run_serves_a2a(docker_client, hello_image, mur_env):
    port = free_port()
    c = docker_client.containers.run(hello_image["tag"], detach=True, network_mode="host", name=f"{RUN}-plain",
                                     environment={"MUR_BIND": "127.0.0.1", "MUR_PORT": str(port)})
    try:
        card = wait_for(lambda: agent_card(port), 120, "the agent card")
        assert card["name"] == "hello"
        out = mur("send", f"127.0.0.1:{port}", "Ada", env=mur_env)
        assert out.stdout.strip() == "Hello, Ada!"
        wait_for(lambda: (c.reload() or c.attrs["State"].get("Health", {}).get("Status")) == "healthy", 60,
                 "the HEALTHCHECK to report healthy")
        startup = json.loads(c.logs(stdout=True, stderr=False).decode().strip().splitlines()[0])
        assert startup["name"] == "hello" and startup["workdir"].startswith("/workdir/")
    finally:
        c.remove(force=True)


def test_bad_tag_and_missing_base_are_clear_errors(mur_env, hello):
    bad = mur("image", "build", "-m", str(hello / "murmur.yaml"), "-t", "Bad Tag", env=mur_env, check=False)
    assert bad.returncode == 1 and bad.stderr.startswith("error[E-IMG-004]: invalid image reference 'Bad Tag'")
    nobase = mur("image", "build", "-m", str(hello / "murmur.yaml"), "-t", f"{RUN}/x:1", "--base-image",
                 f"{RUN}-no-such-base:1", env=mur_env, check=False)
    assert nobase.returncode == 1 and "error[E-IMG-003]: base image" in nobase.stderr
    assert "images/build-base.sh" in nobase.stderr and "Traceback" not in nobase.stderr
