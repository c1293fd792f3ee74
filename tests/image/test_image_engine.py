"""Every docker SDK failure leaves mur.image.engine as a MurError with an E-IMG code (the mapping is total)."""

from __future__ import annotations

import io

import pytest
import requests
from docker.errors import APIError, DockerException, ImageNotFound

from mur.errors import MurError
from mur.image.engine import Engine

FAILURES = [APIError("500 Server Error: boom"), ImageNotFound("no such image"),
            requests.exceptions.ConnectionError("connection refused"), DockerException("broken"),
            OSError(32, "Broken pipe"), ValueError("odd")]


class Failing:
    """A client whose every call raises `exc` (the SDK's failure, injected at the adapter's seam)."""

    def __init__(self, exc):
        self.exc = exc

    def __getattr__(self, name):
        return self

    def __call__(self, *a, **kw):
        raise self.exc


CALLS = {
    "inspect": lambda e: e.inspect("x:1"),
    "base": lambda e: e.base("x:1"),
    "load": lambda e: e.load(io.BytesIO(b"")),
    "tag": lambda e: e.tag("sha256:" + "a" * 64, "x:1"),
    "save": lambda e: e.save("x:1"),
    "remove": lambda e: e.remove("x:1"),
    "push": lambda e: e.push("127.0.0.1:5000/x:1"),
    "pull": lambda e: e.pull("127.0.0.1:5000/x:1"),
    "run": lambda e: e.run("x:1", ["true"]),
}


@pytest.mark.parametrize("exc", FAILURES, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_mapping_is_total(call, exc):
    engine = Engine(client=Failing(exc))
    try:
        CALLS[call](engine)
    except MurError as err:
        assert err.code.startswith("E-IMG-"), err
        if call in ("push", "pull"):
            assert err.code == "E-IMG-002" and err.hint
        elif isinstance(exc, ImageNotFound) and call not in ("inspect", "remove", "base"):
            assert err.code == "E-IMG-003"
    else:  # the calls that treat "not found" as an answer
        assert (call, type(exc)) in {("inspect", ImageNotFound), ("remove", ImageNotFound), ("base", ImageNotFound)}


class Streaming:
    """An SDK whose push/pull stream reports `chunks` (the daemon's JSON progress messages)."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.api = self

    def push(self, *a, **kw):
        return iter(self.chunks)

    pull = push


@pytest.mark.parametrize("text,hint", [
    ("unauthorized: authentication required", "docker login"),
    ("no basic auth credentials", "docker login"),
    ("unsupported: The operation is unsupported.", "read-only"),
    ('Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused', "nothing answers"),
])
def test_registry_refusals_are_explained(text, hint):
    engine = Engine(client=Streaming([{"status": "Preparing", "id": "abc"}, {"error": text, "errorDetail": {}}]))
    with pytest.raises(MurError) as err:
        engine.push("127.0.0.1:5000/x:1")
    assert err.value.code == "E-IMG-002" and text in err.value.message and hint in err.value.hint


def test_push_reports_the_manifest_digest():
    digest = "sha256:" + "d" * 64
    engine = Engine(client=Streaming([{"status": "Pushed", "id": "abc"},
                                      {"status": f"0.1: digest: {digest} size: 1"},
                                      {"aux": {"Tag": "0.1", "Digest": digest, "Size": 1}}]))
    notes = []
    assert engine.push("127.0.0.1:5000/x:0.1", notes.append) == digest
    assert notes == [f"0.1: digest: {digest} size: 1"]  # per-layer progress is not repeated


def test_no_engine_is_e_img_001(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    with pytest.raises(MurError) as err:
        Engine()
    assert err.value.code == "E-IMG-001" and err.value.message.startswith("Docker engine unavailable")
    assert "DOCKER_HOST" in err.value.hint
