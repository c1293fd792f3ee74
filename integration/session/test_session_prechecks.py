"""Pre-checks refuse with their codes before any workdir exists (upstream's order, spec part 2)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import yaml

from session_support import run_mur, session_dirs


def _rewrite(capsule: Path, **changes) -> None:
    manifest = capsule / "murmur.yaml"
    data = yaml.safe_load(manifest.read_text())
    data.update(changes)
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))


def _refused(capsule: Path, home: Path, code: str, *extra: str, env: dict | None = None) -> str:
    proc = run_mur("run", "--task", "x", *extra, cwd=capsule, home=home, env=env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith(f"error[{code}]: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert session_dirs(capsule) == [], "a refused run must not create a workdir"
    return proc.stderr


def test_missing_capsule_component_is_e_run_004(hello, home):
    (hello / "capsule.wasm").unlink()
    err = _refused(hello, home, "E-RUN-004")
    assert "capsule.wasm" in err and "hint: " in err


def test_uninstalled_registry_artifact_is_e_run_008(hello, home):
    data = yaml.safe_load((hello / "murmur.yaml").read_text())
    data["artifacts"].append({"name": "weather", "version": "1.2.0"})
    (hello / "murmur.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    err = _refused(hello, home, "E-RUN-008")
    assert "missing artifacts: weather@1.2.0" in err and "mur install weather@1.2.0" in err


def test_http_inference_without_a_driver_is_e_run_005(hello, home):
    _rewrite(hello, inference={"transport": "http", "model": "m", "endpoint": "http://127.0.0.1:9"})
    err = _refused(hello, home, "E-RUN-005")
    assert "inference.driver.artifact" in err


def test_process_command_not_on_path_is_e_run_006(hello, home):
    _rewrite(hello, inference={"transport": "process", "model": "m", "command": "no-such-claude-xyz"})
    err = _refused(hello, home, "E-RUN-006")
    assert "no-such-claude-xyz" in err and "claude" in err.split("hint:")[1]


def test_unreadable_system_prompt_file_is_e_run_009(hello, home):
    _rewrite(hello, inference={"transport": "process", "model": "m", "command": "sh", "system_prompt_file": "nope.md"})
    err = _refused(hello, home, "E-RUN-009")
    assert "inference.system_prompt_file" in err and "nope.md" in err


def test_taken_internal_port_is_e_run_010(hello, home):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        _rewrite(hello, network={"internal_port": port})
        err = _refused(hello, home, "E-RUN-010")
    assert f"internal_port {port} is already bound" in err


# An executable workdir caps every host at advisory (spec: workdir_exec), so these floors are unmet
# whatever this host achieves (sealed here, scoped or less elsewhere).
EXEC_WORKDIR = {"filesystem": {"workdir_exec": True}}


@pytest.mark.requires_landlock
def test_unmet_containment_floor_is_e_cap_003_before_anything(hello, home):
    _rewrite(hello, capabilities={"containment": "sealed", **EXEC_WORKDIR})
    err = _refused(hello, home, "E-CAP-003")
    assert "declared containment class 'sealed' is not achievable on this host (achieved: 'advisory')" in err
    assert "workdir_exec" in err
    assert "hint: lower the declared floor to 'advisory'" in err


def test_cli_flag_raises_the_floor(hello, home):
    _rewrite(hello, capabilities=EXEC_WORKDIR)
    assert run_mur("run", "--task", "x", cwd=hello, home=home).returncode == 0  # advisory: met
    for d in session_dirs(hello):
        shutil.rmtree(d)
    err = _refused(hello, home, "E-CAP-003", "--containment", "scoped")
    assert "'scoped'" in err


def test_config_file_raises_the_floor(hello, home):
    _rewrite(hello, capabilities=EXEC_WORKDIR)
    (home / ".murmur").mkdir()
    (home / ".murmur" / "config.yaml").write_text("containment: scoped\n")
    _refused(hello, home, "E-CAP-003")


def test_explain_scope_creates_nothing_even_when_the_floor_is_unmet(hello, home):
    _rewrite(hello, capabilities={"containment": "sealed"})
    proc = run_mur("run", "--explain-scope", "--json", cwd=hello, home=home)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    assert session_dirs(hello) == [] and not (hello / "murmur.lock").exists()
