"""The MURMUR_* variables hooks see (spec "Hook WASI environment variables")."""

from __future__ import annotations

from mur.hooks.launch import hook_env
from mur.manifest import load_capsule


def load(tmp_path, text):
    (tmp_path / "murmur.yaml").write_text(text)
    return load_capsule(tmp_path / "murmur.yaml").capsule


BASE = {"MURMUR_SESSION_ID": "ses_1", "MURMUR_CAPSULE_NAME": "c"}


def test_plain_capsule_gets_only_the_session_variables(tmp_path):
    env = hook_env(load(tmp_path, "name: c\nversion: '1'\n"), dict(BASE), host_env={"HOME": "/root"})
    assert env == BASE


def test_otel_eval_formation_case_and_inference(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_KEY_FOR_TEST", "sk-ant-1234567890")
    loaded = load(tmp_path, """
name: c
version: '1'
artifacts:
  - {name: drv, runtime: driver, version: '1.0.0'}
observability:
  otel_endpoint: http://127.0.0.1:4318
  eval:
    dataset_id: from-manifest
    scorers: [{type: exit_ok, name: ok}]
inference:
  transport: http
  endpoint: http://127.0.0.1:9999
  model: claude-haiku-4-5
  api_key: ${SECRET_KEY_FOR_TEST}
  driver: {artifact: drv, config: {flag: true}}
""")
    env = hook_env(loaded, dict(BASE), host_env={"MURMUR_FORMATION_ID": "frm_1", "MURMUR_CASE_ID": "case_7"})
    assert env["MURMUR_OTEL_ENDPOINT"] == "http://127.0.0.1:4318"
    assert env["MURMUR_FORMATION_ID"] == "frm_1" and env["MURMUR_CASE_ID"] == "case_7"
    assert env["MURMUR_DATASET_ID"] == "from-manifest"
    assert env["MURMUR_EVAL_CONFIG"] == '{"dataset_id":"from-manifest","scorers":[{"type":"exit_ok","name":"ok"}]}'
    assert env["MURMUR_INFERENCE_TRANSPORT"] == "http" and env["MURMUR_INFERENCE_MODEL"] == "claude-haiku-4-5"
    assert env["MURMUR_INFERENCE_DRIVER"] == "drv" and env["MURMUR_INFERENCE_DRIVER_CONFIG"] == '{"flag":true}'
    assert "MURMUR_INFERENCE_API_KEY" not in env  # hooks reach the model through run-inference only
    # `mur eval run` overrides the dataset id through the environment
    assert hook_env(loaded, {}, host_env={"MURMUR_DATASET_ID": "run-ds"})["MURMUR_DATASET_ID"] == "run-ds"


def test_process_transport_has_empty_driver_and_endpoint(tmp_path):
    loaded = load(tmp_path, "name: c\nversion: '1'\ninference:\n  transport: process\n  model: m\n")
    env = hook_env(loaded, {}, host_env={})
    assert (env["MURMUR_INFERENCE_TRANSPORT"], env["MURMUR_INFERENCE_DRIVER"], env["MURMUR_INFERENCE_ENDPOINT"]) == \
        ("process", "", "")
    assert "MURMUR_EVAL_CONFIG" not in env and "MURMUR_OTEL_ENDPOINT" not in env
