"""~/.murmur/deployments.json: atomic, locked, upstream-shaped, id prefixes."""

from __future__ import annotations

import json
import os
import re
import threading

import pytest

from mur.deploy.state import DeploymentStore, new_deployment_id, resolve_id
from mur.errors import MurError


def test_ids_are_uuid7_simple_with_the_dep_prefix():
    ids = [new_deployment_id() for _ in range(50)]
    assert all(re.fullmatch(r"dep_[0-9a-f]{32}", i) for i in ids)
    assert all(i[4 + 12] == "7" for i in ids)  # the version nibble
    assert len(set(ids)) == 50
    assert sorted(ids) == ids or ids[0][:12] <= ids[-1][:12]  # time-ordered prefix


def test_missing_file_is_an_empty_list_and_writes_are_private(tmp_path):
    store = DeploymentStore(tmp_path / "deployments.json")
    assert store.load() == []
    store.upsert({"deployment_id": "dep_a", "status": "running"})
    assert json.loads((tmp_path / "deployments.json").read_text()) == [{"deployment_id": "dep_a", "status": "running"}]
    assert os.stat(tmp_path / "deployments.json").st_mode & 0o777 == 0o600
    store.update("dep_a", status="stopped")
    assert store.find("dep_a")["status"] == "stopped"
    store.remove("dep_a")
    assert store.load() == []
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_malformed_file_is_reported_not_overwritten(tmp_path):
    path = tmp_path / "deployments.json"
    path.write_text("{not json")
    with pytest.raises(MurError) as err:
        DeploymentStore(path).load()
    assert err.value.code == "E-IO-003" and "malformed" in err.value.message
    assert path.read_text() == "{not json"


def test_prefix_resolution():
    recs = [{"deployment_id": "dep_aaaa1111"}, {"deployment_id": "dep_aaaa2222"}, {"deployment_id": "dep_bbbb"}]
    assert resolve_id(recs, "dep_bbbb")["deployment_id"] == "dep_bbbb"
    assert resolve_id(recs, "bb")["deployment_id"] == "dep_bbbb"
    assert resolve_id(recs, "dep_aaaa1")["deployment_id"] == "dep_aaaa1111"
    with pytest.raises(MurError) as err:
        resolve_id(recs, "aaaa")
    assert err.value.code == "E-DEPLOY-008" and "ambiguous" in err.value.message
    with pytest.raises(MurError) as err:
        resolve_id(recs, "zzz")
    assert err.value.code == "E-DEPLOY-008" and "mur deploy ls" in err.value.hint


def test_concurrent_writers_lose_nothing(tmp_path):
    store = DeploymentStore(tmp_path / "deployments.json")

    def add(i: int) -> None:
        DeploymentStore(tmp_path / "deployments.json").upsert({"deployment_id": f"dep_{i:04d}"})

    threads = [threading.Thread(target=add, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["deployment_id"] for r in store.load()) == [f"dep_{i:04d}" for i in range(40)]
