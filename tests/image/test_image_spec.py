"""The image config: its digest is the image ID, so it depends on the inputs and nothing else."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess

from mur.image import spec as S


def make(**kw) -> S.ImageSpec:
    base = dict(name="hello", version="0.1.0", mur_version="0.1.0", runtime_sha256="r" * 64, capsule_digest="c" * 64, lock_digest="", base_ref="mur-base:bookworm",
                base_id="sha256:" + "b" * 64, base_digest="", base_diff_ids=("sha256:" + "1" * 64,),
                base_config={"Env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/root"], "Architecture": "amd64",
                             "Os": "linux"},
                layer_diff_id="2" * 64)
    base.update(kw)
    return S.ImageSpec(**base)


def test_config_is_canonical_and_names_every_layer():
    spec = make()
    raw = spec.config_bytes()
    assert raw == make().config_bytes()
    cfg = json.loads(raw)
    assert raw == json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()
    assert cfg["rootfs"]["diff_ids"] == ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    assert len(cfg["history"]) == 2 and cfg["created"] == "1970-01-01T00:00:00Z"


def test_image_id_follows_each_input():
    ident = lambda s: hashlib.sha256(s.config_bytes()).hexdigest()  # noqa: E731
    first = ident(make())
    for change in ({"layer_diff_id": "3" * 64}, {"capsule_digest": "d" * 64}, {"version": "0.1.1"},
                   {"lock_digest": "e" * 64}, {"port": 9000}, {"created": 1700000000}):
        assert ident(make(**change)) != first, change


def test_labels_carry_oci_annotations_and_the_capsule_identity():
    labels = make(lock_digest="f" * 64).labels()
    assert labels["org.opencontainers.image.title"] == "hello"
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.opencontainers.image.base.name"] == "mur-base:bookworm"
    assert "org.opencontainers.image.base.digest" not in labels  # a local base has no registry digest
    assert labels["dev.mur.capsule.digest"] == "c" * 64 and labels["dev.mur.lock.digest"] == "f" * 64
    assert labels["dev.mur.mur_version"] == "0.1.0" and labels["dev.mur.capsule.name"] == "hello"
    assert make().labels()["dev.mur.lock.digest"] == "none"
    assert make(base_digest="sha256:" + "9" * 64).labels()["org.opencontainers.image.base.digest"] == "sha256:" + "9" * 64


def test_non_root_user_healthcheck_entrypoint_and_env():
    cfg = make().config()["config"]
    assert cfg["User"] == "10001:10001" and cfg["Entrypoint"] == [S.ENTRYPOINT]
    assert cfg["Healthcheck"]["Test"] == ["CMD", S.HEALTHCHECK]
    assert cfg["ExposedPorts"] == {"8080/tcp": {}} and cfg["Volumes"] == {"/workdir": {}}
    assert "HOME=/home/mur" in cfg["Env"] and "HOME=/root" not in cfg["Env"] and "PATH=/usr/bin:/bin" in cfg["Env"]
    assert "MURMUR_A2A_TIMEOUT_SECS=0" in cfg["Env"]


def test_source_date_epoch():
    assert S.source_date_epoch({}) == 0
    assert S.source_date_epoch({"SOURCE_DATE_EPOCH": "1700000000"}) == 1700000000
    assert S.rfc3339(1700000000) == "2023-11-14T22:13:20Z"


def test_scripts_are_valid_shell(tmp_path):
    for name, data, shell in (("serve", S.serve_script(("--lifecycle-task-acceptance", "queue")), "sh"),
                              ("health", S.healthcheck_script(), "bash"), ("mur", S.runtime_wrapper("x"), "sh")):
        p = tmp_path / name
        p.write_bytes(data)
        assert subprocess.run([shell, "-n", str(p)]).returncode == 0, name
    assert b"--lifecycle-task-acceptance queue" in S.serve_script(("--lifecycle-task-acceptance", "queue"))


def test_healthcheck_fails_when_nothing_answers(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = tmp_path / "health"
    p.write_bytes(S.healthcheck_script())
    env = {"PATH": "/usr/bin:/bin", "MUR_PORT": str(port), "MUR_BIND": "0.0.0.0"}
    assert subprocess.run(["bash", str(p)], env=env, capture_output=True).returncode == 1


def test_user_is_added_once_to_the_base_files():
    passwd, group = S.with_user("root:x:0:0:root:/root:/bin/bash\nmur:x:5:5::/x:/bin/sh\n", "root:x:0:\n")
    assert passwd.decode().splitlines() == ["root:x:0:0:root:/root:/bin/bash",
                                            "mur:x:10001:10001:mur capsule:/home/mur:/usr/sbin/nologin"]
    assert group.decode().splitlines() == ["root:x:0:", "mur:x:10001:"]


def test_spec_is_frozen():
    assert dataclasses.is_dataclass(S.ImageSpec) and S.ImageSpec.__dataclass_params__.frozen


def test_a_root_image_owns_its_cache_as_root(tmp_path):
    """BuildOptions(user=(0, 0)): the compile cache and /workdir belong to the user the image runs as."""
    import io
    import tarfile
    from types import SimpleNamespace

    from mur.deploy.plan import FileRef
    from mur.image.build import _add_capsule
    from mur.engine.images import BaseImage
    from mur.image.layer import Layer

    (tmp_path / "murmur.yaml").write_text("name: x\n")
    (tmp_path / "c.cwasm").write_bytes(b"code")
    inputs = SimpleNamespace(manifest=FileRef(str(tmp_path / "murmur.yaml"), "murmur.yaml", ""), files=(),
                             artifacts=(), run_args=())
    base = BaseImage("b", "sha256:x", (), {}, "", "root:x:0:0::/root:/bin/sh\n", "root:x:0:\n")
    compiled = [FileRef(str(tmp_path / "c.cwasm"), "c.cwasm", "")]
    for user in ((10001, 10001), (0, 0)):
        layer = Layer()
        _add_capsule(layer, inputs, b"", compiled, base, user)
        buf = io.BytesIO()
        layer.write(buf, 0)
        with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
            owners = {m.name: (m.uid, m.mode) for m in tar.getmembers()}
        assert owners["home/mur/.murmur/cache/wasm"] == (user[0], 0o700)
        assert owners["home/mur/.murmur/cache/wasm/c.cwasm"] == (user[0], 0o600)
        assert owners["workdir"] == (user[0], 0o700) and owners["capsule/murmur.yaml"] == (0, 0o644)
    assert make(uid=0, gid=0).config()["config"]["User"] == "0:0"
