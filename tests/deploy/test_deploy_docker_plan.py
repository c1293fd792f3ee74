"""The Docker target's container, as data: secrets, environment, engine options, limits, label checks."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from mur import __version__
from mur.deploy.providers.docker import ImageFacts, container_plan, image_user, label_mismatch, limits
from mur.deploy.request import DeployRequest
from mur.deploy.targets import TargetSpec
from mur.deploy.targets.docker import container_options
from mur.engine.containers import Secret, _secrets_tar
from mur.errors import MurError

IMAGE = ImageFacts("mur-capsule-0123456789ab:feed", "sha256:" + "ab" * 32, 10001, 10001,
                   {"dev.mur.mur_version": "1.2.3"}, "linux-x86_64")
OPTS = container_options(seccomp_profile=None, memory_bytes=5 << 30, pids_max=384)


def plan(**kw):
    args = {"port": 4100, "bind": "127.0.0.1", "env": {"HELLO_GREETING": "Hola $x"}, "token": b"s3cr3t", "tls": None,
            "options": OPTS}
    args.update(kw)
    image = args.pop("image", IMAGE)
    return container_plan(image, **args)


def test_secrets_live_in_run_mur_owned_by_the_image_user_and_the_config_names_only_paths():
    p = plan()
    assert set(p.secrets) == {"/run/mur/env", "/run/mur/a2a-token"}
    assert all((s.uid, s.gid, s.mode) == (10001, 10001, 0o600) for s in p.secrets.values())
    assert p.secrets["/run/mur/env"].data == b'HELLO_GREETING="Hola \\$x"\n'  # sh-sourceable, $ kept literal
    assert p.env == {"MUR_PORT": "4100", "MUR_BIND": "127.0.0.1", "MUR_ENV_FILE": "/run/mur/env",
                     "MURMUR_A2A_TOKEN_FILE": "/run/mur/a2a-token"}
    assert "s3cr3t" not in json.dumps(p.env) and "Hola" not in json.dumps(p.env)
    tls = plan(tls=(b"CERT", b"KEY"))
    assert tls.secrets["/run/mur/tls.key"].data == b"KEY" and tls.env["MURMUR_A2A_TLS_CERT"] == "/run/mur/tls.crt"
    assert tls.env["MURMUR_A2A_TLS_KEY"] == "/run/mur/tls.key"
    assert p.labels("dep_x") == {"dev.mur.deployment": "dep_x", "dev.mur.release": p.digest}


def test_the_release_digest_changes_with_image_config_and_secrets_only():
    base = plan().digest
    assert plan().digest == base  # an unchanged redeploy is a no-op
    other_image = ImageFacts(IMAGE.tag, "sha256:" + "cd" * 32, 10001, 10001, {}, "linux-x86_64")
    for changed in (plan(env={"HELLO_GREETING": "Hello"}), plan(token=b"other"), plan(port=4101),
                    plan(bind="0.0.0.0"), plan(tls=(b"C", b"K")), plan(image=other_image),
                    plan(options=container_options(seccomp_profile=None, memory_bytes=1 << 30, pids_max=None))):
        assert changed.digest != base


def test_secrets_tar_makes_the_directory_private_to_the_image_user():
    data = _secrets_tar({"/run/mur/a2a-token": Secret(b"t\n", 10001, 10002), "/run/mur/env": Secret(b"", 10001, 10002)})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [(m.name, m.isdir(), m.mode, m.uid, m.gid) for m in tar.getmembers()]
    assert members == [("run/mur", True, 0o700, 10001, 10002), ("run/mur/a2a-token", False, 0o600, 10001, 10002),
                       ("run/mur/env", False, 0o600, 10001, 10002)]


def test_engine_options_are_non_root_friendly_and_never_privileged(tmp_path):
    assert OPTS == {"network_mode": "host", "cgroupns": "private", "cap_drop": ["ALL"], "init": True,
                    "security_opt": ["no-new-privileges:true"], "mem_limit": 5 << 30, "pids_limit": 384}
    assert "pids_limit" not in container_options(seccomp_profile=None, memory_bytes=1, pids_max=None)
    prof = tmp_path / "p.json"
    prof.write_text('{"defaultAction": "SCMP_ACT_ERRNO"}')
    opts = container_options(seccomp_profile=str(prof), memory_bytes=1, pids_max=None)
    assert opts["security_opt"][1] == 'seccomp={"defaultAction": "SCMP_ACT_ERRNO"}'
    with pytest.raises(MurError) as err:
        container_options(seccomp_profile=str(tmp_path / "nope.json"), memory_bytes=1, pids_max=None)
    assert err.value.code == "E-DEPLOY-001"


def capsule(shell: bool, memory: int = 256 << 20, pids: int = 12):
    res = SimpleNamespace(cgroup_memory_bytes=memory, cgroup_pids_max=pids)
    return SimpleNamespace(needs_subprocess=shell, capsule=SimpleNamespace(capabilities=SimpleNamespace(resources=res)),
                           service_memory_bytes=memory + (1 << 30), service_tasks_max=pids + 128)


def test_shell_tools_get_the_container_cgroup_as_their_bound():
    # shell tools: the container's memory is exactly theirs, and no pids.max (it would count the runtime's
    # threads too, and one above cgroup_pids_max fails the enclosing-bound check): RLIMIT_NPROC bounds tasks
    assert limits(capsule(True)) == (256 << 20, None)
    assert limits(capsule(False)) == ((256 << 20) + (1 << 30), 140)


def test_image_user_and_label_checks():
    assert image_user("10001:10001") == (10001, 10001) and image_user("") == (0, 0) and image_user("7") == (7, 7)
    with pytest.raises(MurError) as err:
        image_user("mur")
    assert err.value.code == "E-DEPLOY-012"
    cap = SimpleNamespace(name="hello", version="0.1.0", digest="d1", mur_version=None)
    labels = {"dev.mur.capsule.name": "hello", "dev.mur.capsule.version": "0.1.0", "dev.mur.capsule.digest": "d1",
              "dev.mur.mur_version": __version__}
    assert label_mismatch(labels, cap) == []
    assert label_mismatch({**labels, "dev.mur.capsule.digest": "d0"}, cap) == ["capsule.digest is d0, the manifest's d1"]
    assert label_mismatch({}, cap)[0] == "capsule.name is (none), the manifest's hello"


def test_image_options_need_the_docker_target_and_one_source():
    with pytest.raises(MurError) as err:
        DeployRequest(manifest=Path("m"), target=TargetSpec("local"), image="x:1")
    assert (err.value.code, err.value.message) == ("E-DEPLOY-001", "--image and --image-archive deploy to Docker only")
    with pytest.raises(MurError) as err:
        DeployRequest(manifest=Path("m"), target=TargetSpec("docker"), image="x:1", image_archive=Path("a"))
    assert err.value.code == "E-DEPLOY-001"
    assert DeployRequest(manifest=Path("m"), target=TargetSpec("docker"), image="x:1").image == "x:1"
