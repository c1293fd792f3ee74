"""deploy.yaml as an operator writes it: targets, groups, env and secrets files, destinations, selection,
and the errors a mistake gets (field path, value, hint)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mur.errors import MurError
from mur.fleet import config, plan as fplan

FLEET = """\
defaults:
  user: deployer
  key: keys/id_ed25519
  env_file: common.env
  env: {LEVEL: info}
groups:
  canary: {env: {GREETING: Hi}, publish: true}
  eu: {env_file: eu.env}
targets:
  web-1: {host: 10.0.0.1}
  web-2: {host: 10.0.0.2, port: 2222, groups: [canary, eu], env: {LEVEL: debug}}
  box: {docker: {}, groups: [eu]}
  here: {local: true, secrets_file: here.secrets}
rollout:
  batch: "50%"
  smoke: {message: ping, expect: pong}
"""


@pytest.fixture
def fleet_dir(tmp_path):
    (tmp_path / "deploy.yaml").write_text(FLEET)
    (tmp_path / "common.env").write_text("LEVEL=warn\nREGION=none\n")
    (tmp_path / "eu.env").write_text("REGION=eu\n")
    (tmp_path / "here.secrets").write_text("API_KEY=s3cret\n")
    (tmp_path / "here.secrets").chmod(0o600)
    return tmp_path


def resolve(path, **kw):
    return fplan.resolve(config.read(path / "deploy.yaml", kw.get("destination")), path / "deploy.yaml",
                         capsule="hello", **kw)


def test_settings_resolve_defaults_then_groups_then_target_then_secrets_then_cli(fleet_dir):
    p = resolve(fleet_dir, env_args=["EXTRA=1"])
    t = {x.name: x for x in p.targets}
    assert list(t) == ["web-1", "web-2", "box", "here"]
    assert p.name == "hello" and p.key == "hello" and p.manifest == fleet_dir / "murmur.yaml"
    assert t["web-1"].spec.user == "deployer" and t["web-1"].spec.port == 22
    assert t["web-1"].spec.key_file == str(fleet_dir / "keys" / "id_ed25519")
    assert dict(t["web-1"].env) == {"LEVEL": "info", "REGION": "none", "EXTRA": "1"}
    assert dict(t["web-2"].env) == {"LEVEL": "debug", "REGION": "eu", "GREETING": "Hi", "EXTRA": "1"}
    assert t["web-2"].publish and not t["web-1"].publish and t["web-2"].spec.port == 2222
    assert t["box"].kind == "docker" and t["here"].kind == "local"
    assert dict(t["here"].env)["API_KEY"] == "s3cret" and t["here"].secret_keys == {"API_KEY"}
    assert p.batch_size() == 2 and [[x.name for x in b] for b in p.batches()] == [["web-1", "web-2"], ["box", "here"]]
    assert t["web-2"].tag(p) == {"name": "hello", "destination": None, "target": "web-2", "groups": ["canary", "eu"]}


def test_only_takes_targets_and_groups_and_host_narrows(fleet_dir):
    assert [t.name for t in resolve(fleet_dir, only=["eu"]).targets] == ["web-2", "box"]
    assert [t.name for t in resolve(fleet_dir, only=["web-1,here"]).targets] == ["web-1", "here"]
    assert [t.name for t in resolve(fleet_dir, host="10.0.0.2").targets] == ["web-2"]
    with pytest.raises(MurError) as err:
        resolve(fleet_dir, only=["web-9"])
    assert err.value.code == "E-FLEET-002" and "web-9" in err.value.message and "web-1, web-2" in err.value.hint
    with pytest.raises(MurError) as err:
        resolve(fleet_dir, host="10.9.9.9")
    assert err.value.code == "E-FLEET-002" and "10.0.0.1, 10.0.0.2" in err.value.hint


def test_destination_merges_over_the_base_file(fleet_dir):
    (fleet_dir / "deploy.staging.yaml").write_text(
        "name: hello-staging\ntargets:\n  web-2: null\n  box: null\n  here: null\n  web-1: {host: 10.1.0.1}\n"
        "rollout: {batch: 1}\n")
    p = resolve(fleet_dir, destination="staging")
    assert p.key == "hello-staging.staging" and [t.spec.host for t in p.targets] == ["10.1.0.1"]
    assert p.targets[0].spec.user == "deployer" and p.smoke.expect == "pong" and p.batch == 1
    with pytest.raises(MurError) as err:
        resolve(fleet_dir, destination="prod")
    assert err.value.code == "E-FLEET-001" and "deploy.prod.yaml" in err.value.message


def test_secrets_file_others_can_read_is_refused(fleet_dir):
    (fleet_dir / "here.secrets").chmod(0o644)
    with pytest.raises(MurError) as err:
        resolve(fleet_dir)
    assert err.value.code == "E-FLEET-001" and "readable by other users" in err.value.message
    assert err.value.hint.startswith("chmod 600")


@pytest.mark.parametrize("text, message", [
    ("targets: {}\n", "targets: name at least one target"),
    ("targets:\n  web: {host: a, docker: {}}\n", "targets.web: a target is exactly one of: host (SSH), docker, local: true (it sets host, docker)"),
    ("targets:\n  web: {}\n", "targets.web: a target is exactly one of"),
    ("targets:\n  web: {host: a, groups: [x]}\n", "target 'web' lists group 'x', which groups: does not define"),
    ("targets:\n  Web_1: {host: a}\n", "target name 'Web_1'"),
    ("targets:\n  web: {host: a, prot: 22}\n", "targets.web.prot: unknown key"),
    ("targets:\n  web: {host: a, port: '22'}\n", "targets.web.port: Input should be a valid integer (got '22')"),
    ("targets:\n  web: {host: a, env: {A: 1}}\n", "targets.web.env.A: Input should be a valid string (got 1)"),
    ("targets:\n  web: {host: a}\nrollout: {batch: 0}\n", "rollout.batch"),
    ("targets:\n  web: {host: a}\nrollout: {batch: '120%'}\n", "neither a count nor a percentage"),
    ("targets:\n  a: {local: true}\n  b: {local: true}\n", "targets 'a' and 'b' are the same place"),
    ("- just a list\n", "expected a mapping"),
    ("targets: [\n", "YAML syntax error at line"),
])
def test_mistakes_name_the_field_and_the_value(tmp_path, text, message):
    (tmp_path / "deploy.yaml").write_text(text)
    with pytest.raises(MurError) as err:
        resolve(tmp_path)
    assert err.value.code == "E-FLEET-001" and message in err.value.message, err.value.message
    assert err.value.message.startswith("deploy.yaml")


def test_batch_option_parses_counts_and_percentages():
    assert fplan.parse_batch("3") == 3 and fplan.parse_batch("25%") == "25%"
    for bad in ("0", "x", "150%", "-1"):
        with pytest.raises(MurError):
            fplan.parse_batch(bad)


def test_schema_describes_the_file_and_accepts_the_example(fleet_dir):
    jsonschema = pytest.importorskip("jsonschema")
    out = subprocess.run([sys.executable, "-m", "mur", "schema", "fleet"], capture_output=True, text=True, check=True)
    schema = json.loads(out.stdout)
    assert schema["title"].startswith("mur fleet file") and "targets" in schema["required"]
    import yaml

    jsonschema.validate(yaml.safe_load(FLEET), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"targets": {"web": {"host": "a", "prot": 1}}}, schema)
