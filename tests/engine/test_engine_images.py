"""What a registry says in a push or pull stream: a refusal is E-IMG-002 with its words and a hint for the usual
cause; a push reports the manifest digest. (tests/engine/test_engine_errors.py: the mapping of SDK errors.)"""

from __future__ import annotations

import pytest

from mur.engine.docker import DockerEngine
from mur.errors import MurError


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
    engine = DockerEngine(Streaming([{"status": "Preparing", "id": "abc"}, {"error": text, "errorDetail": {}}]))
    with pytest.raises(MurError) as err:
        engine.push("127.0.0.1:5000/x", "1")
    assert err.value.code == "E-IMG-002" and text in err.value.message and hint in err.value.hint


def test_push_reports_the_manifest_digest():
    digest = "sha256:" + "d" * 64
    engine = DockerEngine(Streaming([{"status": "Pushed", "id": "abc"},
                                     {"status": f"0.1: digest: {digest} size: 1"},
                                     {"aux": {"Tag": "0.1", "Digest": digest, "Size": 1}}]))
    notes = []
    assert engine.push("127.0.0.1:5000/x", "0.1", notes.append) == digest
    assert notes == [f"0.1: digest: {digest} size: 1"]  # per-layer progress is not repeated


def test_a_container_names_first_the_image_it_was_created_from():
    """A reproducible build gives one image several repositories' tags (another deployment's, an image
    build's): what a container runs is the name it was created from, whichever tag the engine lists first."""
    from types import SimpleNamespace

    from mur.engine.docker import DockerEngine

    own = "mur-capsule-0123456789ab:feedfacefeedface"
    container = SimpleNamespace(status="running", labels={}, image=SimpleNamespace(tags=["hello:0.1.0", own]),
                                attrs={"Config": {"Image": own}, "State": {}, "HostConfig": {}})
    client = SimpleNamespace(containers=SimpleNamespace(get=lambda name: container))
    assert DockerEngine(client).container("mur-x").image_tags == (own, "hello:0.1.0")
    container.attrs["Config"]["Image"] = "sha256:" + "a" * 64  # created by id: the engine's order stands
    assert DockerEngine(client).container("mur-x").image_tags == ("hello:0.1.0", own)
