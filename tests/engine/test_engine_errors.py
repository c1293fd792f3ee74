"""Every docker SDK failure leaves mur.engine as a MurError (the mapping is total): every operation of
the one engine, image and container alike, driven with every exception class the SDK raises (its own,
requests' transport errors, OSError, a garbled reply's ValueError). Image operations answer E-IMG-*
(E-IMG-002 for a registry's, E-IMG-003 for a missing image), container operations E-DEPLOY-010; only
"not there" may come back as a value."""

from __future__ import annotations

import inspect
import io
import json
import socket
import subprocess
import sys

import docker.errors
import pytest
import requests.exceptions
from error_classes import instances

from mur.engine.containers import Secret
from mur.engine.docker import DEPLOY_TIMEOUT, IMAGE_TIMEOUT, DockerEngine
from mur.errors import MurError


SDK_ERRORS = [*instances(docker.errors), *instances(requests.exceptions, requests.exceptions.RequestException),
              OSError(32, "Broken pipe"), ValueError("odd")]


class Raiser:
    """Every attribute is another Raiser; calling one raises `exc` (an SDK whose calls all fail)."""

    def __init__(self, exc: BaseException, found: bool = False):
        self.exc, self.found = exc, found

    def __getattr__(self, name):
        if self.found and name == "containers":
            return _Found(self.exc)
        return Raiser(self.exc)

    def __call__(self, *a, **k):
        raise self.exc

    def __iter__(self):  # a lazy SDK property (container.image.tags) fails when read
        raise self.exc


class _Found:
    """containers.get finds a container whose every operation fails."""

    def __init__(self, exc):
        self.exc = exc

    def get(self, name):
        c = Raiser(self.exc)
        c.__dict__.update(status="running", labels={}, attrs={})
        return c

    def __getattr__(self, name):
        return Raiser(self.exc)


IMAGE_CALLS = {
    "inspect": lambda e: e.inspect("x:1"),
    "base": lambda e: e.base("x:1"),
    "load": lambda e: e.load(io.BytesIO(b"")),
    "tag": lambda e: e.tag("sha256:" + "a" * 64, "x", "1"),
    "save": lambda e: e.save("x:1"),
    "remove_image": lambda e: e.remove_image("x:1"),
    "push": lambda e: e.push("127.0.0.1:5000/x", "1"),
    "pull": lambda e: e.pull("127.0.0.1:5000/x", "1"),
    "run": lambda e: e.run("x:1", ["true"]),
}
CONTAINER_CALLS = {
    "info": lambda e: e.info(), "run_once": lambda e: e.run_once("i", ["true"], {}),
    "container": lambda e: e.container("c"),
    "create": lambda e: e.create("i", "c", {}, {}, {}, {"/a/b": Secret(b"x", 10001, 10001)}),
    "start": lambda e: e.start("c"),
    "stop": lambda e: e.stop("c"), "remove": lambda e: e.remove("c"), "rename": lambda e: e.rename("c", "d"),
    "exec": lambda e: e.exec("c", ["true"]), "stdout_since": lambda e: e.stdout_since("c", 0),
    "put_file": lambda e: e.put_file("c", "/a/b", b"x", 0o600), "images": lambda e: e.images("r"),
    "untag": lambda e: e.untag("r"), "logs": lambda e: e.logs("c"), "labelled": lambda e: e.labelled("l"),
}
DOOR = {"call", "find", "each", "throwaway", "discard"}  # the SDK door itself, not an operation


def test_every_operation_is_driven_here():
    public = {n for n, _ in inspect.getmembers(DockerEngine, inspect.isfunction) if not n.startswith("_")}
    assert public - DOOR == set(IMAGE_CALLS) | set(CONTAINER_CALLS), "a new engine operation needs a line here"


@pytest.mark.parametrize("exc", SDK_ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("found", [False, True], ids=["absent", "found"])
def test_every_operation_translates_every_sdk_error(exc, found):
    engine = DockerEngine(Raiser(exc, found))
    missing = isinstance(exc, docker.errors.NotFound)  # ImageNotFound is one
    for name, call in IMAGE_CALLS.items():
        try:
            result = call(engine)
        except MurError as err:
            if name in ("push", "pull"):
                assert err.code == "E-IMG-002" and err.hint, (name, exc, err)
            elif missing:
                assert err.code == "E-IMG-003", (name, exc, err)
            else:
                assert err.code == "E-IMG-001", (name, exc, err)
            continue
        # the operations that take "not found" as an answer
        assert missing and name in ("inspect", "remove_image") and result is None, (name, exc, result)
    for name, call in CONTAINER_CALLS.items():
        try:
            result = call(engine)
        except MurError as err:
            assert err.code == "E-DEPLOY-010", (name, exc, err)
            continue
        # only "not there" may come back as a value (and a container whose image is gone), never a raw error
        gone_image = name == "container" and found and result.image_tags == ()
        assert gone_image or (missing and result in (None, False, "")), (name, exc, result)


class Streaming:
    """An SDK whose streams (push, pull, load, save, followed logs) give one chunk, then raise `exc`."""

    def __init__(self, exc):
        self.exc = exc
        self.api = self
        self.containers = self

    def _stream(self, *a, **kw):
        yield {"status": "Preparing", "id": "abc"}
        raise self.exc

    push = pull = load_image = get_image = logs = _stream

    def get(self, name):
        c = Streaming(self.exc)
        c.status, c.labels, c.attrs = "running", {}, {}
        return c


@pytest.mark.parametrize("exc", SDK_ERRORS, ids=lambda e: type(e).__name__)
def test_a_stream_that_breaks_is_translated(exc):
    engine = DockerEngine(Streaming(exc))
    for call, code in [(lambda: engine.push("127.0.0.1:5000/x", "1"), "E-IMG-002"),
                       (lambda: engine.pull("127.0.0.1:5000/x", "1"), "E-IMG-002"),
                       (lambda: engine.load(io.BytesIO(b"")), "E-IMG-001"),
                       (lambda: list(engine.save("x:1")), "E-IMG-001"),
                       (lambda: engine.logs("c", follow=True, sink=lambda b: None), "E-DEPLOY-010")]:
        with pytest.raises(MurError) as err:
            call()
        assert err.value.code in (code, "E-IMG-003" if code == "E-IMG-001" else code), exc


def test_no_engine_is_e_img_001_for_images_and_e_deploy_010_for_deploy(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    with pytest.raises(MurError) as err:
        DockerEngine.for_images()
    assert err.value.code == "E-IMG-001" and err.value.message.startswith("Docker engine unavailable")
    assert "DOCKER_HOST" in err.value.hint
    with pytest.raises(MurError) as err:
        DockerEngine.for_deploy()
    assert err.value.code == "E-DEPLOY-010"
    assert err.value.message == (f"docker: connect to the engine failed: nothing answers at unix://{tmp_path}"
                                 "/no-such.sock: No such file or directory")  # not the SDK's three-deep repr
    assert err.value.hint == "is the engine running (docker info)? see docs/deploy.md"
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    with pytest.raises(MurError) as err:
        DockerEngine.for_deploy()
    assert err.value.message.endswith(f"nothing answers at tcp://127.0.0.1:{port}: Connection refused")


def test_a_docker_deploy_that_finds_no_engine_leaves_no_record(tmp_path):
    """The deployment's record is reserved before the engine is reached; a deploy that never reached
    one used to leave it as an `incomplete` deployment (and its token) that destroy could not remove."""
    project = tmp_path / "capsule"
    project.mkdir()
    (project / "murmur.yaml").write_text("name: x\nversion: 0.1.0\n")
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    deploy = subprocess.run([sys.executable, "-m", "mur", "deploy", "--docker", "-m", str(project / "murmur.yaml")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert deploy.returncode == 1 and "error[E-DEPLOY-010]" in deploy.stderr, deploy.stderr
    listed = subprocess.run([sys.executable, "-m", "mur", "deploy", "ls", "--json"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stdout
    assert not list((tmp_path / "home" / ".murmur").glob("deploy_keys/*"))


def test_each_side_connects_with_its_own_timeout(monkeypatch):
    asked = []

    class Client:
        def ping(self):
            return True

    def from_env(**kw):
        asked.append(kw["timeout"])
        return Client()

    monkeypatch.setattr(docker, "from_env", from_env)
    assert isinstance(DockerEngine.for_images().client, Client) and isinstance(DockerEngine.for_deploy().client, Client)
    assert asked == [IMAGE_TIMEOUT, DEPLOY_TIMEOUT] == [600, 120]
