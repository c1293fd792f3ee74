"""Finding deployments by what operators call them: `hello@web-1`, a capsule or fleet name (every
deployment of it, or an answering one for `mur send`), short id prefixes; and the grouped `ls`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from front_support import start_backend, write_token
from mur.cli.fleet import render_ls
from mur.deploy.state import Deployment, DeploymentStore, Release, named, new_deployment_id, resolve_id
from mur.deploy.targets import TargetSpec
from mur.errors import MurError
from mur.fleet import address, ops


def rec(name, target, host, dest=None, version="1.0.0", n=1, url="", token_file=None):
    d = Deployment(new_deployment_id(), "ssh", TargetSpec("ssh", host=host, user="root"), name=name, version=version,
                   status="running", url=url, release=Release(n=n), token_file=token_file)
    if target:
        d.extra["fleet"] = {"name": name, "destination": dest, "target": target, "groups": ["eu"] if target == "web-2" else []}
    return d


@pytest.fixture
def store(tmp_path):
    s = DeploymentStore(tmp_path / "deployments.json")
    for d in (rec("hello", "web-1", "10.0.0.1"), rec("hello", "web-2", "10.0.0.2", n=2, version="1.1.0"),
              rec("hello", "web-1", "10.1.0.1", dest="staging"), rec("other", None, "10.0.0.9")):
        s.save(d)
    return s


def test_name_at_target_and_destinations(store):
    records = store.load()
    assert resolve_id(records, "hello@web-2").target.host == "10.0.0.2"
    assert resolve_id(records, "hello@10.0.0.2").target.host == "10.0.0.2"  # the host works as well
    assert resolve_id(records, "hello.staging@web-1").target.host == "10.1.0.1"
    with pytest.raises(MurError) as err:
        resolve_id(records, "hello@web-1")  # production and staging both have a web-1
    assert err.value.code == "E-DEPLOY-008" and "staging" in err.value.message and "NAME.DESTINATION@TARGET" in err.value.hint
    with pytest.raises(MurError) as err:
        resolve_id(records, "hello@web-9")
    assert err.value.code == "E-DEPLOY-008" and "no deployment of 'hello' on 'web-9'" in err.value.message


def test_short_prefixes_of_ids_made_together_are_unambiguous(store):
    records = store.load()
    for d in records:
        assert resolve_id(records, d.deployment_id[4:10]).deployment_id == d.deployment_id


def test_a_name_covers_every_deployment_of_it_narrowed_by_only(store):
    records = store.load()
    assert len(named(records, "hello")) == 3
    assert [d.target.host for d in address.resolve_many(records, "hello.staging")] == ["10.1.0.1"]
    assert [d.target.host for d in address.resolve_many(records, "hello", ["eu"])] == ["10.0.0.2"]
    assert ops.covers_many("hello", store) and not ops.covers_many("hello@web-2", store)
    assert not ops.covers_many("nothing", store)
    with pytest.raises(MurError) as err:
        ops.targets("hello", store=store)  # production and staging are two fleets
    assert "several fleets" in err.value.message


def test_ls_groups_by_capsule_and_fleet_and_says_where_versions_differ(store):
    out = render_ls([d.to_dict() for d in store.load()])
    lines = out.splitlines()
    assert lines[0].startswith("DEPLOYMENT_ID") and "FLEET" in lines[0] and "VERSION" in lines[0]
    names = [ln.split()[1] for ln in lines[1:5]]
    assert names == ["hello", "hello", "hello", "other"]
    assert "web-1 (root@10.0.0.1:22)" in out
    assert "fleet hello: targets differ: 1.0.0 (release 1) on web-1; 1.1.0 (release 2) on web-2" in out
    assert "fleet hello.staging: 1.0.0 (release 1) on all 1 target(s)" in out


def test_pick_sends_to_an_answering_deployment(store):
    down = {"10.0.0.1"}
    hit = address.pick("hello.staging", store=store, check=lambda d: True)
    assert hit is not None
    chosen = {address.pick("hello", store=_only_prod(store), check=lambda d: d.target.host not in down).url
              for _ in range(10)}
    assert chosen == {"u-10.0.0.2"}
    with pytest.raises(MurError) as err:
        address.pick("hello", store=_only_prod(store), check=lambda d: False)
    assert err.value.code == "E-FLEET-003" and "hello@web-1" in err.value.message
    assert address.pick("localhost:8080", store=store) is None and address.pick("nothing", store=store) is None
    assert address.pick("hello", "web-2", store=_only_prod(store), check=lambda d: False).url == "u-10.0.0.2"


def _only_prod(store):
    for d in store.load():
        if d.extra.get("fleet", {}).get("destination") == "staging" or d.name == "other":
            store.remove(d.deployment_id)
        else:
            d.url = f"u-{d.target.host}"
            store.save(d)
    return store


def test_mur_send_name_reaches_an_answering_deployment(tmp_path):
    """Two deployments of `hello`, one of them down: `mur send hello` is answered, every time."""
    home = tmp_path / "home"
    (home / ".murmur").mkdir(parents=True)
    token_file = tmp_path / "token"
    write_token(token_file)
    live = start_backend("r1", token_file)
    try:
        store = DeploymentStore(home / ".murmur" / "deployments.json")
        store.save(rec("hello", "web-1", "10.0.0.1", url=f"http://127.0.0.1:{live.port}", token_file=str(token_file)))
        store.save(rec("hello", "web-2", "10.0.0.2", url="http://127.0.0.1:9", token_file=str(token_file)))
        env = {**os.environ, "HOME": str(home)}
        for _ in range(3):
            out = subprocess.run([sys.executable, "-m", "mur", "send", "hello", "hi", "--json"], capture_output=True,
                                 text=True, env=env, timeout=60)
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["status"]["state"] == "completed"
        bad = subprocess.run([sys.executable, "-m", "mur", "send", "hello", "hi", "--target", "web-2"],
                             capture_output=True, text=True, env=env, timeout=60)
        assert bad.returncode == 1 and "error[E-A2A-001]" in bad.stderr
    finally:
        live.stop()
