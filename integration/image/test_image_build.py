"""`mur image build`: reproducible (same inputs, same image ID; one byte changed, another ID), labelled,
non-root, and it serves A2A under a plain `docker run`."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time

import pytest

from image_support import RUN, copy_capsule, mur, mur_json, wait_for

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
    since = int(time.time()) - 1
    changed = mur_json("image", "build", "-m", str(other / "murmur.yaml"), "-t", f"{RUN}/hello:changed", env=mur_env)
    assert changed["id"] != first["id"] and changed["layer"]["diff_id"] != first["layer"]["diff_id"]
    assert changed["capsule"]["digest"] != first["capsule"]["digest"]
    # the runtime check's throwaway container (the image declares /workdir a volume) left no volume behind
    until = int(time.time()) + 1
    mine = {e["Actor"]["ID"] for e in docker_client.events(since=since, until=until, decode=True,
                                                            filters={"type": "container", "event": "create"})
            if e["Actor"]["Attributes"].get("image") == changed["id"]}
    assert mine, "the build ran no container in the new image (the runtime check did not run?)"
    mounted = {e["Actor"]["ID"] for e in docker_client.events(since=since, until=until, decode=True,
                                                               filters={"type": "volume", "event": "mount"})
               if e["Actor"]["Attributes"].get("container") in mine}
    assert mounted, "the runtime check mounted no /workdir volume"
    left = {v.name for v in docker_client.volumes.list()} & mounted
    assert not left, f"volumes left by the build: {left}"


def test_the_fallback_archive_with_every_layer_gives_the_same_image(docker_client, hello_image, mur_env, hello,
                                                                      monkeypatch):
    """Engines that need every blob (containerd's image store) get the base layers too: same ID."""
    from mur.resolve.shipped import ship
    from mur.image import BuildOptions, build_image

    for key in ("HOME", "MUR_BUNDLE_CACHE", "MUR_CACHE_DIR"):
        monkeypatch.setenv(key, mur_env[key])
    docker_client.images.remove(hello_image["id"], force=True)
    res = build_image(ship(hello / "murmur.yaml"), hello_image["tag"], options=BuildOptions(full_archive=True))
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


@pytest.mark.requires_root  # nsenter into the container's network namespace
def test_the_printed_docker_run_lines_serve_with_a_token(docker_client, hello_image, hello, mur_env, tmp_path):
    """What `mur image build` prints, run as printed in a shell, except what this machine's engine cannot do:
    it has no bridge network (dockerd --bridge=none), so the port is not published; the container gets a
    network namespace of its own and the printed `mur send` runs inside it (the door listens on 0.0.0.0
    there, exactly as behind `-p`). The container's name is made unique to this test run."""
    human = mur("image", "build", "-m", str(hello / "murmur.yaml"), "-t", hello_image["tag"], env=mur_env).stdout
    lines = hello_image["docker_run"]
    for key in ("token", "serve", "send", "stop"):
        assert f"  {key:<9} {lines[key]}" in human, human
    shell_env = {**mur_env, "PATH": f"{os.path.dirname(sys.executable)}:{mur_env['PATH']}"}

    def sh(line: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", line], cwd=tmp_path, env=shell_env, capture_output=True, text=True,
                              timeout=300, **kw)

    assert sh(lines["token"]).returncode == 0
    env_file = tmp_path / "hello.a2a.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600 and env_file.read_text().startswith("MURMUR_A2A_TOKEN=")
    name = f"{RUN}-printed"
    serve = lines["serve"].replace("-p 127.0.0.1:8080:8080", "--network none").replace("--name mur-hello", f"--name {name}")
    assert serve != lines["serve"] and sh(serve).returncode == 0
    c = docker_client.containers.get(name)
    try:
        # the HEALTHCHECK presents the token (from the container's env) and the door accepts it
        wait_for(lambda: (c.reload() or c.attrs["State"].get("Health", {}).get("Status")) == "healthy", 120,
                 "the HEALTHCHECK to report healthy")
        pid = str(c.attrs["State"]["Pid"])
        sent = sh(f"nsenter -t {pid} -n bash -c {shlex.quote(lines['send'])}")
        assert (sent.returncode, sent.stdout.strip()) == (0, "Hello, hello!"), sent.stderr
        bare = sh(f"nsenter -t {pid} -n mur send 127.0.0.1:8080 hello")
        assert bare.returncode == 1 and "error[E-A2A-002]" in bare.stderr  # off loopback, never without the token
        token = env_file.read_text().split("=", 1)[1].strip()
        assert token.encode() not in c.exec_run(["cat", "/proc/1/environ"]).output  # out of the runtime's env
        startup = json.loads(c.logs(stdout=True, stderr=False).decode().strip().splitlines()[0])
        assert startup["name"] == "hello" and startup["workdir"].startswith("/workdir/")
        assert sh(lines["stop"].replace("mur-hello", name)).returncode == 0
        wait_for(lambda: not docker_client.containers.list(all=True, filters={"name": name}), 60, "--rm to remove it")
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True)


def test_bad_tag_and_missing_base_are_clear_errors(mur_env, hello):
    bad = mur("image", "build", "-m", str(hello / "murmur.yaml"), "-t", "Bad Tag", env=mur_env, check=False)
    assert bad.returncode == 1 and bad.stderr.startswith("error[E-IMG-004]: invalid image reference 'Bad Tag'")
    nobase = mur("image", "build", "-m", str(hello / "murmur.yaml"), "-t", f"{RUN}/x:1", "--base-image",
                 f"{RUN}-no-such-base:1", env=mur_env, check=False)
    assert nobase.returncode == 1 and "error[E-IMG-003]: base image" in nobase.stderr
    assert "images/build-base.sh" in nobase.stderr and "Traceback" not in nobase.stderr
