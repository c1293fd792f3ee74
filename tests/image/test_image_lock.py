"""The murmur.lock an image carries: the project's, verified, or one pinned at build time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mur.artifacts.lock import MurmurLock, parse_lock, write_lock
from mur.resolve.shipped import ArtifactRef
from mur.errors import MurError
from mur.image.build import _lock

SHA = "a" * 64


def capsule(tmp_path, artifacts):
    (tmp_path / "murmur.yaml").write_text("name: x\nversion: '1'\n")
    return SimpleNamespace(manifest_path=tmp_path / "murmur.yaml",
                           artifacts=tuple(ArtifactRef(n, v, (), f"{n}.mur.zip", s) for n, v, s in artifacts))


def test_an_existing_lock_is_verified_and_carried_unchanged(tmp_path):
    inputs = capsule(tmp_path, [("tool", "1.0.0", SHA)])
    lock = MurmurLock()
    lock.upsert("tool", "1.0.0", SHA)
    write_lock(tmp_path / "murmur.lock", lock)
    before = (tmp_path / "murmur.lock").read_bytes()
    notes = []
    assert _lock(inputs, notes) == before and notes == []


@pytest.mark.parametrize("pinned,message", [
    (("tool", "0.9.0", SHA), "lockfile version mismatch for 'tool'"),
    (("tool", "1.0.0", "b" * 64), "tool"),
    (("other", "1.0.0", SHA), "murmur.lock missing artifact entry for 'tool'"),
])
def test_a_lock_that_disagrees_fails_the_build(tmp_path, pinned, message):
    inputs = capsule(tmp_path, [("tool", "1.0.0", SHA)])
    lock = MurmurLock()
    lock.upsert(*pinned)
    write_lock(tmp_path / "murmur.lock", lock)
    with pytest.raises(MurError) as err:
        _lock(inputs, [])
    assert err.value.code in ("E-RUN-003", "E-REG-002") and message in err.value.message


def test_no_lock_pins_the_artifacts_into_the_image_and_leaves_the_project_alone(tmp_path):
    inputs = capsule(tmp_path, [("tool", "1.0.0", SHA), ("drv", "2.0.0", "c" * 64)])
    notes = []
    made = parse_lock(_lock(inputs, notes).decode())
    assert [(a.name, a.resolved_version, a.sha256) for a in made.artifacts] == [("tool", "1.0.0", SHA),
                                                                                ("drv", "2.0.0", "c" * 64)]
    assert not (tmp_path / "murmur.lock").exists() and "tool@1.0.0" in notes[0]


def test_no_versioned_artifact_no_lock(tmp_path):
    assert _lock(capsule(tmp_path, []), []) == b""
