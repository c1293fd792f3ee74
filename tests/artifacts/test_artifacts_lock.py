"""murmur.lock v1: parse/validate messages, atomic writes, install conflicts (E-REG-005)."""

from __future__ import annotations

import threading

import pytest

from mur.artifacts.lock import (
    MurmurLock,
    check_install_conflict,
    lock_path,
    parse_lock,
    project_locked,
    read_lock,
    write_lock,
)
from mur.errors import MurError

GOOD = "lock_version: 1\nartifacts:\n- name: echo-tool\n  resolved_version: 0.0.1\n  sha256:\n    wasm: abc123\n"


def test_round_trip_and_exact_layout(tmp_path):
    lock = parse_lock(GOOD)
    assert lock.entry("echo-tool").sha256 == "abc123"
    path = tmp_path / "murmur.lock"
    write_lock(path, lock)
    assert path.read_text() == GOOD
    assert read_lock(path) == lock
    assert read_lock(tmp_path / "absent.lock") is None
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_versions_stay_strings(tmp_path):
    lock = MurmurLock()
    lock.upsert("t", "0.1", "ff")
    lock.upsert("u", "1", "ee")
    write_lock(tmp_path / "murmur.lock", lock)
    again = read_lock(tmp_path / "murmur.lock")
    assert [(a.name, a.resolved_version) for a in again.artifacts] == [("t", "0.1"), ("u", "1")]


def test_upsert_preserves_other_entries_and_order():
    lock = parse_lock(GOOD)
    lock.upsert("new-tool", "1.0.0", "def")
    lock.upsert("echo-tool", "0.0.2", "999")
    assert [(a.name, a.resolved_version, a.sha256) for a in lock.artifacts] == [
        ("echo-tool", "0.0.2", "999"),
        ("new-tool", "1.0.0", "def"),
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("lock_version: 2\nartifacts: []\n", "unsupported lock_version 2 (expected 1)"),
        (
            "lock_version: 1\nartifacts:\n- name: ''\n  resolved_version: 1\n  sha256: {wasm: a}\n",
            "YAML parse error: artifacts[0].resolved_version: invalid type: integer `1`, expected a string",
        ),
        ("lock_version: 1\nartifacts:\n- name: ' '\n  resolved_version: '1'\n  sha256: {wasm: a}\n", "artifact entry has empty name"),
        (
            "lock_version: 1\nartifacts:\n- name: t\n  resolved_version: ''\n  sha256: {wasm: a}\n",
            "artifact 't' has empty resolved_version",
        ),
        (
            "lock_version: 1\nartifacts:\n- name: t\n  resolved_version: '1'\n  sha256: {wasm: ''}\n",
            "artifact 't' has empty sha256.wasm",
        ),
        ("artifacts: []\n", "YAML parse error: missing field `lock_version`"),
        ("lock_version: 1\n", "YAML parse error: missing field `artifacts`"),
        (
            "lock_version: 1\nartifacts:\n- name: t\n  resolved_version: '1'\n  sha256:\n    any: a\n",
            "YAML parse error: artifacts[0].sha256: missing field `wasm`",
        ),
        ("- 1\n", "YAML parse error: invalid type: sequence, expected struct MurmurLock"),
        ("lock_version: one\nartifacts: []\n", "YAML parse error: lock_version: invalid type: string 'one', expected u32"),
    ],
)
def test_invalid_locks_are_e_run_003(text, message):
    with pytest.raises(MurError) as err:
        parse_lock(text)
    assert err.value.code == "E-RUN-003"
    assert err.value.message == f"invalid murmur.lock: {message}"


def test_yaml_syntax_error_is_invalid_lock():
    with pytest.raises(MurError) as err:
        parse_lock("lock_version: [1\n")
    assert err.value.code == "E-RUN-003"
    assert err.value.message.startswith("invalid murmur.lock: YAML parse error: ")


def test_install_conflict_is_e_reg_005():
    lock = parse_lock(GOOD)
    check_install_conflict(None, "echo-tool", "0.0.1", "zzz")
    check_install_conflict(lock, "other", "1", "zzz")
    check_install_conflict(lock, "echo-tool", "0.0.1", "abc123")
    with pytest.raises(MurError) as err:
        check_install_conflict(lock, "echo-tool", "0.0.1", "fff")
    assert err.value.render() == (
        "error[E-REG-005]: murmur.lock conflict for 'echo-tool': pinned echo-tool@0.0.1 (sha256 abc123), "
        "but the registry now resolves echo-tool@0.0.1 (sha256 fff)\n"
        "  hint: if this is an intentional upgrade, remove the stale entry from murmur.lock before installing again"
    )
    with pytest.raises(MurError) as err:
        check_install_conflict(lock, "echo-tool", "0.0.2", "abc123")
    assert err.value.code == "E-REG-005"


def test_concurrent_upserts_under_the_project_lock_lose_nothing(tmp_path):
    path = lock_path(tmp_path)

    def worker(i: int) -> None:
        with project_locked(tmp_path):
            lock = read_lock(path) or MurmurLock()
            lock.upsert(f"tool-{i}", "1.0.0", f"{i:064x}")
            write_lock(path, lock)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a.name for a in read_lock(path).artifacts) == sorted(f"tool-{i}" for i in range(12))
