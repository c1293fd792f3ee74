"""Hook contract validation (binding / execution_mode / commit_policy), upstream's rules."""

from __future__ import annotations

import pytest

from mur.errors import MurError
from mur.hooks.config import ALL, HookConfig, classify_output, parse_hook_config, read_hook_config


def test_defaults_are_all_events_blocking_none():
    cfg = parse_hook_config({"name": "h", "version": "1", "runtime": "hook"})
    assert cfg == HookConfig(ALL, "blocking", "none")
    assert cfg.receives("on-session-start") and cfg.receives("on-compaction")
    assert not cfg.receives("on-stage")  # an absent binding never includes on-stage


@pytest.mark.parametrize("binding,policy", [
    ("on-stage", "write-manifests"),
    ("on-compaction", "replace-context"),
    ("on-task-end", "reopen-task"),
    ("on-tool-call", "none"),
    (None, "replace-context"),  # an absent binding admits every policy
    (None, "reopen-task"),
])
def test_valid_binding_policy_pairs(binding, policy):
    root = {"commit_policy": policy}
    if binding:
        root["binding"] = binding
    cfg = parse_hook_config(root)
    assert cfg.commit_policy == policy
    if binding:
        assert cfg.receives(binding) and cfg.binding == binding


def test_bound_hook_receives_only_its_event():
    cfg = parse_hook_config({"binding": "on-task-end", "commit_policy": "reopen-task"})
    assert cfg.receives("on-task-end")
    assert not cfg.receives("on-session-end") and not cfg.receives("on-stage")


def rendered(root) -> str:
    with pytest.raises(MurError) as info:
        parse_hook_config(root, "tools/h/murmur.yaml")
    assert info.value.code == "E-MAN-003"
    return info.value.message


def test_async_with_commit_is_refused():
    assert rendered({"execution_mode": "async", "commit_policy": "replace-context"}) == (
        "tools/h/murmur.yaml: async-with-commit not supported: execution_mode 'async' requires commit_policy "
        "'none' (got 'replace-context')")


def test_on_stage_must_be_blocking():
    assert "on-stage hooks must be blocking" in rendered({"binding": "on-stage", "execution_mode": "async"})


def test_policy_the_binding_cannot_honor():
    assert rendered({"binding": "on-session-end", "commit_policy": "reopen-task"}) == (
        "tools/h/murmur.yaml: commit_policy 'reopen-task' is not valid for binding 'on-session-end'; binding "
        "'on-session-end' honors commit_policy 'none'")
    assert rendered({"binding": "on-compaction", "commit_policy": "write-manifests"}).endswith(
        "binding 'on-compaction' honors commit_policy 'replace-context'")
    assert "has no commit_policy spelling" in rendered({"binding": "on-inference", "commit_policy": "replace-context"})


@pytest.mark.parametrize("key,value", [("binding", "on-start"), ("execution_mode", "later"),
                                       ("commit_policy", "seed-context"), ("binding", 3)])
def test_unknown_values_name_the_key_and_the_choices(key, value):
    message = rendered({key: value})
    assert f"unknown {key} '{value if isinstance(value, str) else 'int'}'" in message
    assert "expected:" in message


def test_async_observer_is_fine():
    assert parse_hook_config({"execution_mode": "async"}).is_async


def test_read_hook_config_from_file(tmp_path):
    (tmp_path / "murmur.yaml").write_text("name: h\nversion: '1'\nruntime: hook\nbinding: on-compaction\n"
                                          "commit_policy: replace-context\n")
    assert read_hook_config(tmp_path / "murmur.yaml").binding == "on-compaction"
    (tmp_path / "murmur.yaml").write_text("binding: [unclosed\n")
    with pytest.raises(MurError) as info:
        read_hook_config(tmp_path / "murmur.yaml", "tools/h/murmur.yaml")
    assert info.value.code == "E-MAN-002" and info.value.message.startswith("tools/h/murmur.yaml: ")
    with pytest.raises(MurError) as info:
        read_hook_config(tmp_path / "missing.yaml")
    assert info.value.code == "E-IO-001"


@pytest.mark.parametrize("event,tag,verdict", [
    ("on-inference", "artifact", "honored"),
    ("on-compaction", "replace-context", "honored"),
    ("on-task-end", "reopen-task", "honored"),
    ("on-stage", "write-manifests", "honored"),
    ("on-tool-call", "write-manifests", "fault"),
    ("on-session-end", "artifact", "fault"),
    ("on-task-end", "replace-context", "fault"),
    ("on-tool-call", None, "ignore"),
    ("on-compaction", "none", "ignore"),
])
def test_committed_arm_per_handler(event, tag, verdict):
    assert classify_output(event, tag) == verdict
