"""`mur run` stages what murmur.lock pins (mur.session.lockpins, upstream's rule)."""

from __future__ import annotations

import pytest

from mur.errors import MurError
from mur.manifest import load_capsule
from mur.session.lockpins import pinned

MANIFEST = """name: c
version: '1'
artifacts:
  - name: greet
    version: 0.1.0
  - name: notes
    runtime: skill
    source: notes.md
    local_source: true
"""
LOCK = "lock_version: 1\nartifacts:\n  - name: greet\n    resolved_version: {v}\n    sha256:\n      wasm: {h}\n"


def loaded(tmp_path, lock: str | None):
    (tmp_path / "notes.md").write_text("notes")
    (tmp_path / "murmur.yaml").write_text(MANIFEST)
    if lock is not None:
        (tmp_path / "murmur.lock").write_text(lock)
    return load_capsule(tmp_path / "murmur.yaml")


def test_without_a_lock_the_manifest_versions_stand(tmp_path):
    capsule = loaded(tmp_path, None)
    assert pinned(capsule) is capsule


def test_the_lock_pin_replaces_the_manifest_version(tmp_path):
    capsule = pinned(loaded(tmp_path, LOCK.format(v="0.2.0", h="a" * 64)))
    assert capsule.capsule.artifact("greet").version == "0.2.0"
    assert capsule.capsule.artifact("notes").source == "notes.md"  # local sources are never locked


def test_a_declared_artifact_the_lock_lacks_is_e_run_003(tmp_path):
    with pytest.raises(MurError) as err:
        pinned(loaded(tmp_path, "lock_version: 1\nartifacts: []\n"))
    assert (err.value.code, err.value.message) == ("E-RUN-003", "murmur.lock missing artifact entry for 'greet'")
