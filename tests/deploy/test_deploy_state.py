"""~/.murmur/deployments.json: atomic, locked, upstream-shaped, id prefixes."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pytest

from mur.deploy.state import Deployment, DeploymentStore, Release, new_deployment_id, resolve_id
from mur.deploy.targets import TargetSpec
from mur.errors import MurError


def dep(dep_id: str, **kw) -> Deployment:
    return Deployment(dep_id, "local", TargetSpec("local"), **kw)


def test_ids_keep_upstreams_form_differ_early_and_still_sort_by_time():
    from mur.ids import created_ms, deployment_sort_key

    ids = [new_deployment_id() for _ in range(50)]
    assert all(re.fullmatch(r"dep_[0-9a-f]{32}", i) for i in ids)
    assert all(i[4 + 12] == "8" and i[4 + 16] in "89ab" for i in ids)  # UUIDv8 version and variant
    assert len({i[:12] for i in ids}) == 50  # made in one burst, yet upstream's 12-character short form tells them apart
    assert sorted(ids, key=deployment_sort_key) == ids
    assert all(abs(created_ms(i) - time.time() * 1000) < 60_000 for i in ids)
    old = "dep_" + "0195d4c3a8f17abc8def0123456789ab"  # an upstream UUIDv7 id sorts among them by its time
    assert sorted([ids[0], old], key=deployment_sort_key)[0] == old


def test_missing_file_is_an_empty_list_and_writes_are_private(tmp_path):
    store = DeploymentStore(tmp_path / "deployments.json")
    assert store.load() == []
    store.save(dep("dep_a", status="running"))
    (raw,) = json.loads((tmp_path / "deployments.json").read_text())
    assert raw["deployment_id"] == "dep_a" and raw["status"] == "running" and raw["provider"] == "local"
    assert os.stat(tmp_path / "deployments.json").st_mode & 0o777 == 0o600
    a = store.find("dep_a")
    a.status = "stopped"
    store.save(a)
    assert store.find("dep_a").status == "stopped"
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
    recs = [dep("dep_aaaa1111"), dep("dep_aaaa2222"), dep("dep_bbbb")]
    assert resolve_id(recs, "dep_bbbb").deployment_id == "dep_bbbb"
    assert resolve_id(recs, "bb").deployment_id == "dep_bbbb"
    assert resolve_id(recs, "dep_aaaa1").deployment_id == "dep_aaaa1111"
    with pytest.raises(MurError) as err:
        resolve_id(recs, "aaaa")
    assert err.value.code == "E-DEPLOY-008" and "ambiguous" in err.value.message
    with pytest.raises(MurError) as err:
        resolve_id(recs, "zzz")
    assert err.value.code == "E-DEPLOY-008" and "mur deploy ls" in err.value.hint


def test_a_capsule_name_that_covers_one_deployment_names_it():
    """Every command that takes one deployment (status, rollback, logs, trace --deployment, send)
    takes the capsule name `mur deploy ls` shows, as it takes the id; a name that covers several
    says which, and a name is looked for before an id prefix ('bb' is a capsule here)."""
    recs = [dep("dep_aaaa1111", name="hello"), Deployment("dep_aaaa2222", "docker", TargetSpec("docker"), name="hello"),
            dep("dep_bbbb", name="solo"), dep("dep_cccc", name="bb")]
    assert resolve_id(recs, "solo").deployment_id == "dep_bbbb"
    assert resolve_id(recs, " solo ").deployment_id == "dep_bbbb"
    assert resolve_id(recs, "bb").deployment_id == "dep_cccc"
    with pytest.raises(MurError) as err:
        resolve_id(recs, "hello")
    assert err.value.code == "E-DEPLOY-008"
    assert "'hello' names 2 deployments: dep_aaaa1111 (local), dep_aaaa2222 (docker)" in err.value.message
    assert err.value.hint == "name one as hello@TARGET, or give its id"
    assert resolve_id(recs, "hello@docker").deployment_id == "dep_aaaa2222"


def test_concurrent_writers_lose_nothing(tmp_path):
    store = DeploymentStore(tmp_path / "deployments.json")

    def add(i: int) -> None:
        DeploymentStore(tmp_path / "deployments.json").save(dep(f"dep_{i:04d}"))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.deployment_id for r in store.load()) == [f"dep_{i:04d}" for i in range(40)]


def test_records_are_typed_and_keep_what_they_do_not_know(tmp_path):
    """An upstream-shaped record (only ip, no target) reads; unknown keys survive a rewrite."""
    path = tmp_path / "deployments.json"
    path.write_text(json.dumps([{"deployment_id": "dep_up", "provider": "ssh", "ip": "203.0.113.7", "url": "http://x",
                                 "manifest_path": "/m", "started_at": "2026-01-01T00:00:00Z", "status": "running",
                                 "future_field": {"kept": True},
                                 "release": {"n": 3, "digest": "d", "bundle": "b", "capsule": {"name": "c"}}}]))
    store = DeploymentStore(path)
    (d,) = store.load()
    assert d.target == TargetSpec("ssh", host="203.0.113.7", user="root") and d.release.n == 3
    assert isinstance(d.release, Release) and d.release.extra == {"capsule": {"name": "c"}}
    store.save(d)
    (raw,) = json.loads(path.read_text())
    assert raw["future_field"] == {"kept": True} and raw["release"]["capsule"] == {"name": "c"}
    assert raw["started_at"] == "2026-01-01T00:00:00Z" and raw["region"] == ""
