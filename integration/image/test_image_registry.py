"""Push, pull and save against real things: Debian's docker-registry (distribution 2.8) on loopback, and
the engine's own `docker load`. Each test leaves the session's image as it found it (same ID, same tag)."""

from __future__ import annotations

import hashlib
import json
import tarfile

import pytest

from image_support import RUN, Registry, docker_config, mur, mur_json, tiny_image

pytestmark = [pytest.mark.requires_docker, pytest.mark.slow]


@pytest.fixture
def registry(tmp_path):
    reg = Registry(tmp_path / "registry")
    yield reg
    reg.close()


def retag(docker_client, image_id: str, ref: str) -> None:
    repo, tag = ref.rsplit(":", 1)
    docker_client.api.tag(image_id, repo, tag)


def test_push_then_pull_back_gives_equal_digests_and_the_same_image(docker_client, hello_image, mur_env, registry):
    ref = f"{registry.address}/{RUN}/hello:0.1.0"
    retag(docker_client, hello_image["id"], ref)
    pushed = mur_json("image", "push", ref, env=mur_env)
    assert pushed["id"] == hello_image["id"] and pushed["digest"].startswith("sha256:")
    assert registry.manifest_digest(f"{RUN}/hello", "0.1.0") == pushed["digest"]  # what the registry stores
    # forget the image entirely, then pull it back from the registry
    docker_client.images.remove(hello_image["id"], force=True)
    docker_client.images.pull(ref)
    back = docker_client.images.get(ref)
    assert back.id == hello_image["id"]  # the same config, so the same image ID
    assert f"{registry.address}/{RUN}/hello@{pushed['digest']}" in back.attrs["RepoDigests"]
    retag(docker_client, back.id, hello_image["tag"])
    # pushing again changes nothing: same digest
    assert mur_json("image", "push", ref, env=mur_env)["digest"] == pushed["digest"]


def test_a_registry_that_wants_credentials(docker_client, mur_env, tmp_path):
    reg = Registry(tmp_path / "auth", users={"ci": "s3cret"})
    try:
        ref = f"{reg.address}/{RUN}/tiny:1"
        tiny_image(docker_client, ref)
        no_login = {**mur_env, "DOCKER_CONFIG": str(tmp_path / "empty-docker-config")}
        refused = mur("image", "push", ref, env=no_login, check=False)
        assert refused.returncode == 1 and f"\nerror[E-IMG-002]: push {ref} refused: " in refused.stderr
        assert "hint: the registry wants credentials: `docker login" in refused.stderr
        assert "Traceback" not in refused.stderr
        login = {**mur_env, "DOCKER_CONFIG": str(docker_config(tmp_path / "docker-config", reg.address, "ci", "s3cret"))}
        pushed = mur_json("image", "push", ref, env=login)
        assert reg.manifest_digest(f"{RUN}/tiny", "1", auth=("ci", "s3cret")) == pushed["digest"]
    finally:
        reg.close()


def test_a_read_only_registry_and_one_that_is_not_there(docker_client, mur_env, tmp_path):
    reg = Registry(tmp_path / "ro", read_only=True)
    try:
        ref = f"{reg.address}/{RUN}/tiny:1"
        tiny_image(docker_client, ref)
        refused = mur("image", "push", ref, env=mur_env, check=False)
        assert refused.returncode == 1 and "error[E-IMG-002]" in refused.stderr
        assert "read-only" in refused.stderr
    finally:
        reg.close()
    gone = mur("image", "push", ref, env=mur_env, check=False)  # the registry has stopped: nothing listens
    assert gone.returncode == 1 and "error[E-IMG-002]" in gone.stderr and "hint:" in gone.stderr


def test_push_needs_a_registry_in_the_tag(hello_image, mur_env):
    res = mur("image", "push", hello_image["tag"], env=mur_env, check=False)
    assert res.returncode == 1 and "error[E-IMG-004]" in res.stderr and "names no registry" in res.stderr


def test_save_is_an_oci_archive_that_loads_back_as_the_same_image(docker_client, hello_image, mur_env, tmp_path):
    out = tmp_path / "hello.oci.tar"
    saved = mur_json("image", "save", hello_image["tag"], "-o", str(out), env=mur_env)
    assert saved["id"] == hello_image["id"] and saved["path"] == str(out)
    with tarfile.open(out) as tar:
        index = json.loads(tar.extractfile("index.json").read())
        assert index["manifests"][0]["digest"] == saved["manifest_digest"]
        assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == hello_image["tag"]
        manifest = json.loads(tar.extractfile(f"blobs/sha256/{saved['manifest_digest'].split(':')[1]}").read())
        assert manifest["annotations"]["org.opencontainers.image.title"] == "hello"
        config = tar.extractfile(f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}").read()
        assert "sha256:" + hashlib.sha256(config).hexdigest() == hello_image["id"]
    # the air-gapped host: an engine without the image loads the archive
    docker_client.images.remove(hello_image["id"], force=True)
    loaded = mur_json("image", "load", str(out), env=mur_env)
    assert loaded == {"tag": hello_image["tag"], "id": hello_image["id"]}
    assert hello_image["tag"] in docker_client.images.get(hello_image["id"]).tags


def test_saving_twice_gives_the_same_bytes(docker_client, mur_env, tmp_path):
    tag = f"{RUN}/tiny:save"
    tiny_image(docker_client, tag)
    one, two = tmp_path / "one.tar", tmp_path / "two.tar"
    mur_json("image", "save", tag, "-o", str(one), env=mur_env)
    mur_json("image", "save", tag, "-o", str(two), env=mur_env)
    assert one.read_bytes() == two.read_bytes()


def test_save_and_load_errors(mur_env, tmp_path):
    missing = mur("image", "save", f"{RUN}/absent:1", "-o", str(tmp_path / "x.tar"), env=mur_env, check=False)
    assert missing.returncode == 1 and "error[E-IMG-003]: image" in missing.stderr and "mur image build" in missing.stderr
    assert not (tmp_path / "x.tar").exists()
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"junk")
    bad = mur("image", "load", str(junk), env=mur_env, check=False)
    assert bad.returncode == 1 and "error[E-IMG-003]" in bad.stderr
