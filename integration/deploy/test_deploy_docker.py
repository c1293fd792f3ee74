"""mur deploy --docker: the capsule image of `mur image build` (the one builder) run as one container per
deployment, Docker as the supervisor (host network on 127.0.0.1, the image's non-root user, no capabilities,
the container's cgroup as the shell tools' aggregate bound); prebuilt images by tag or from a saved archive."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from pathlib import Path

from deploy_support import FORK_40, READ_OUTSIDE, ROOT, a2a_send, refused_outside, mur, mur_json, shell_task

pytestmark = [pytest.mark.requires_docker, pytest.mark.slow]
GiB = 1 << 30


def send(res: dict, text: str) -> str:
    return a2a_send(res["url"], text, token=Path(res["token_file"]).read_text().strip())


def containers(client, dep_id):
    return [c.name for c in client.containers.list(all=True, filters={"label": f"dev.mur.deployment={dep_id}"})]


def capsule_images(client) -> set[str]:
    return {i.id for i in client.images.list(filters={"reference": "mur-capsule-*"})}


def saved_bytes(client, image: str, tmp_path: Path) -> bytes:
    """Every byte of the image as `docker save` writes it (config, every layer)."""
    out = tmp_path / "saved.tar"
    with open(out, "wb") as fh:
        for chunk in client.images.get(image).save(named=False):
            fh.write(chunk)
    return out.read_bytes()


def test_docker_deploy_redeploy_rollback_destroy(docker_client, base_image, home, runtime_bundle, hello_capsule,
                                                 tmp_path):
    manifest = str(hello_capsule / "murmur.yaml")
    before = capsule_images(docker_client)
    report = mur_json("deploy", "--docker", "-m", manifest, "--check", home=home)
    assert capsule_images(docker_client) == before  # the check's image went with the check
    assert report["ok"] and report["provider"] == "docker"
    assert report["probe"]["landlock_abi"] >= 1  # Landlock works under the engine's seccomp profile
    assert report["supervisor"] == "docker (restart policy unless-stopped)"
    assert report["user"] == "10001:10001" and report["pids_limit"] == 256 + 128

    (hello_capsule / ".env").write_text("HELLO_GREETING=Hello\n")
    first = mur_json("deploy", "--docker", "-m", manifest, home=home)
    dep = first["deployment_id"]
    assert first["image"].startswith(f"mur-capsule-{dep[4:16]}:")
    assert send(first, "container") == "Hello, container!"
    assert containers(docker_client, dep) == [f"mur-{dep}"]
    c = docker_client.containers.get(f"mur-{dep}")
    host = c.attrs["HostConfig"]
    assert host["NetworkMode"] == "host" and host["CgroupnsMode"] == "private" and host["CapDrop"] == ["ALL"]
    assert not host["CapAdd"] and not host["Privileged"] and host["Init"] is True
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["Memory"] == 4 * GiB + GiB and host["PidsLimit"] == 256 + 128  # the service limits (no shell tools)
    assert host["RestartPolicy"]["Name"] == "unless-stopped"  # back after a crash, an engine restart, a reboot
    # the builder's image, run as its own non-root user with its own entrypoint (mur-serve)
    img = docker_client.images.get(first["image"])
    assert img.attrs["Config"]["Entrypoint"] == ["/usr/local/bin/mur-serve"]
    assert img.attrs["Config"]["Labels"]["dev.mur.capsule.name"] == "hello"
    assert c.exec_run(["id", "-u"]).output == b"10001\n"
    # the env file and the token are copied into the container, never into the image or the container's config
    tok = Path(first["token_file"]).read_text().strip()
    assert c.exec_run(["stat", "-c", "%a %u", "/run/mur/a2a-token", "/run/mur/env", "/run/mur"]).output == \
        b"600 10001\n600 10001\n700 10001\n"
    image_bytes = saved_bytes(docker_client, first["image"], tmp_path)
    assert tok.encode() not in image_bytes and b'HELLO_GREETING="Hello"' not in image_bytes
    assert tok not in json.dumps(c.attrs["Config"]) and "HELLO_GREETING" not in json.dumps(c.attrs["Config"])
    # the main process dies unexpectedly (kill -9 from the host): the restart policy brings it back
    os.kill(c.attrs["State"]["Pid"], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if docker_client.containers.get(f"mur-{dep}").attrs["RestartCount"] >= 1 and \
                mur("deploy", "status", dep, "--json", home=home, check=False).returncode == 0:
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
    volumes = {m["Name"] for name in (f"mur-{dep}", f"mur-{dep}-prev")
               for m in docker_client.containers.get(name).attrs["Mounts"] if m.get("Type") == "volume"}
    assert len(volumes) == 2  # each container's /workdir

    # one command at a time: a stop that holds the deployment's lock (stopped right there) keeps a
    # rollback out, naming itself; killed with -9, its lock goes with it
    from deploy_support import Deploying

    holder = Deploying(["deploy", "stop", dep], home, stop_at="stop:begin",
                       env={"MUR_DEPLOY_DEAD_AFTER": "120", "MUR_DEPLOY_KEEPALIVE": "1"})
    holder.stopped()
    st = mur_json("deploy", "status", dep, home=home)
    assert st["state"]["locked_by"]["command"] == f"mur deploy stop {dep}"  # status reads, never takes it
    r = mur("deploy", "rollback", dep, home=home, check=False)
    assert r.returncode == 1 and "error[E-DEPLOY-013]" in r.stderr and f"(pid {holder.proc.pid} on " in r.stderr
    holder.kill()
    back = mur_json("deploy", "rollback", dep, home=home)
    assert back["status"] == "running" and back["release"] == first["image"]
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
    assert capsule_images(docker_client) == before
    assert not volumes & {v.name for v in docker_client.volumes.list()}  # nothing left behind
    assert mur_json("deploy", "ls", home=home) == []


def test_a_prebuilt_image_and_a_saved_archive_deploy(docker_client, base_image, home, runtime_bundle, hello_capsule,
                                                     tmp_path):
    manifest = str(hello_capsule / "murmur.yaml")
    tag = "mur-test-prebuilt/hello:0.1.0"
    built = mur_json("image", "build", "-m", manifest, "-t", tag, home=home)
    try:
        res = mur_json("deploy", "--docker", "-m", manifest, "--image", tag, home=home)
        dep = res["deployment_id"]
        assert docker_client.images.get(res["image"]).id == built["id"]  # the same image, tagged for the deployment
        assert send(res, "prebuilt") == "Hello, prebuilt!"
        mur("deploy", "destroy", dep, home=home)
        assert containers(docker_client, dep) == [] and docker_client.images.list(name=f"mur-capsule-{dep[4:16]}") == []
        assert docker_client.images.get(tag).id == built["id"]  # the operator's image and tag stay

        archive = tmp_path / "hello.oci.tar"
        mur_json("image", "save", tag, "-o", str(archive), home=home)
        docker_client.images.remove(built["id"], force=True)  # an engine that never saw the image
        res = mur_json("deploy", "--docker", "-m", manifest, "--image-archive", str(archive), home=home)
        assert docker_client.images.get(res["image"]).id == built["id"]
        assert send(res, "archive") == "Hello, archive!"
        mur("deploy", "destroy", res["deployment_id"], home=home)
    finally:
        try:
            docker_client.images.remove(built["id"], force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def test_tls_key_and_certificate_reach_the_non_root_container_only(docker_client, base_image, home, runtime_bundle,
                                                                  hello_capsule, tmp_path):
    res = mur_json("deploy", "--docker", "-m", str(hello_capsule / "murmur.yaml"), "--tls", "self-signed", home=home)
    dep = res["deployment_id"]
    try:
        assert res["url"].startswith("https://127.0.0.1:") and res["tls_pin"]
        assert mur("send", dep, "tls", home=home).stdout == "Hello, tls!\n"  # pinned certificate, token from the record
        c = docker_client.containers.get(f"mur-{dep}")
        assert c.exec_run(["stat", "-c", "%a %u", "/run/mur/tls.key", "/run/mur/tls.crt"]).output == \
            b"600 10001\n600 10001\n"
        key = c.exec_run(["cat", "/run/mur/tls.key"]).output
        assert b"PRIVATE KEY" in key and key not in saved_bytes(docker_client, res["image"], tmp_path)
        assert "PRIVATE KEY" not in json.dumps(c.attrs["Config"])
    finally:
        mur("deploy", "destroy", dep, home=home)


def test_bad_images_and_archives_are_clear_errors(docker_client, base_image, home, runtime_bundle, hello_capsule,
                                                  tmp_path):
    manifest = str(hello_capsule / "murmur.yaml")
    hint = ("  hint: build it with `mur image build -m MANIFEST -t TAG`, pull it, or load one with "
            "--image-archive FILE\n")

    def fails(*args: str) -> str:
        proc = mur("deploy", "--docker", "-m", manifest, *args, home=home, check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        return proc.stderr[proc.stderr.index("error["):]

    assert fails("--image", "mur-test-absent:1") == \
        "error[E-DEPLOY-012]: image mur-test-absent:1 is not in the Docker engine\n" + hint
    assert fails("--image", base_image) == \
        f"error[E-DEPLOY-012]: image {base_image} is not a mur capsule image (no dev.mur.capsule.* labels)\n" + hint
    missing = tmp_path / "missing.tar"
    assert fails("--image-archive", str(missing)) == (
        f"error[E-DEPLOY-012]: cannot deploy from the archive: image archive not found: {missing}\n"
        "  hint: write it with `mur image save TAG -o FILE` (one image, uncompressed layers)\n")
    corrupt = tmp_path / "corrupt.tar"
    corrupt.write_bytes(b"not a tar at all" * 100)
    err = fails("--image-archive", str(corrupt))
    assert err.startswith(f"error[E-DEPLOY-012]: cannot deploy from the archive: {corrupt} is not an image archive")
    assert err.endswith("  hint: write it with `mur image save TAG -o FILE` (one image, uncompressed layers)\n")
    # the manifest was changed after the image was built: refused, with what differs
    tag = "mur-test-prebuilt/hello:stale"
    mur_json("image", "build", "-m", manifest, "-t", tag, home=home)
    try:
        text = (hello_capsule / "murmur.yaml").read_text()
        (hello_capsule / "murmur.yaml").write_text(text.replace('version: "0.1.0"', 'version: "0.1.1"'))
        err = fails("--image", tag)
        assert err.startswith(f"error[E-DEPLOY-012]: image {tag} was not built from {manifest}: "
                              "capsule.version is 0.1.0, the manifest's 0.1.1; capsule.digest is ")
        assert f"  hint: deploy the manifest it was built from, or rebuild it: mur image build -m {manifest} -t {tag}\n" \
            in err
    finally:
        (hello_capsule / "murmur.yaml").write_text(text)
        docker_client.images.remove(tag, force=True)
    assert mur_json("deploy", "ls", home=home) == []  # nothing recorded by a refused deploy


def test_shell_tools_get_aggregate_limits_in_the_container(docker_client, base_image, home, runtime_bundle,
                                                           shell_capsule):
    res = mur_json("deploy", "--docker", "-m", str(shell_capsule / "murmur.yaml"),
                   "--seccomp-profile", str(ROOT / "images" / "seccomp-landlock.json"), home=home)
    dep = res["deployment_id"]
    try:
        c = docker_client.containers.get(f"mur-{dep}")
        host = c.attrs["HostConfig"]
        # the container's cgroup is the tool tree's bound: memory exactly cgroup_memory_bytes, no pids.max
        # (RLIMIT_NPROC, capped at cgroup_pids_max, bounds the tools' tasks), and nothing inside can raise it
        assert host["Memory"] == 268435456 and not host["PidsLimit"] and host["CapDrop"] == ["ALL"]
        forks, outside = json.loads(send(res, shell_task(FORK_40, READ_OUTSIDE)))
        # cgroup_pids_max: 12 for the whole tool tree: forks fail long before 40 sleeps
        assert "Cannot fork" in forks["data"] and "started" not in forks["data"], forks
        # and Landlock is in force: the tool cannot read files outside its grants
        assert refused_outside(outside["data"]), outside
        boot = c.exec_run(["sh", "-c", "cat /workdir/sessions/ses_*/logs/bootstrap.log"]).output.decode()
        assert "the aggregate bound is the cgroup mur runs in" in boot, boot[-3000:]
    finally:
        mur("deploy", "destroy", dep, home=home)
