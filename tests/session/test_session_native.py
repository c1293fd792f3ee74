"""Native tools (mur.session.native): upstream's staging layout and result protocol, the sandbox view."""

from __future__ import annotations

import io
import os
import stat
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from mur.errors import MurError
from mur.fsafe import Tree
from mur.sandbox.result import ShellResult
from mur.session import native


def shell_result(stdout: str = "", exit_code: int = 0, stderr: str = "", **kw) -> ShellResult:
    return ShellResult(exit_code, stdout, stderr, False, None, 1, len(stdout), len(stderr), "/x/tool", "tool", None, **kw)


def test_a_json_answer_becomes_the_tool_result():
    res = native.tool_result("t", shell_result('{"status": "passed", "summary": "ok", "data": {"path": "a"}}\n'))
    assert (res.status, res.summary, res.data) == ("passed", "ok", '{"path":"a"}')
    res = native.tool_result("t", shell_result('{"status": "failed", "summary": "exists", "data": null}'))
    assert (res.status, res.summary, res.data) == ("failed", "exists", None)
    assert native.tool_result("t", shell_result('{"status": "weird"}')).status == "error"


def test_no_output_or_non_json_output_goes_by_the_exit_status():
    res = native.tool_result("t", shell_result("", exit_code=1, stderr="boom"))
    assert (res.status, res.summary, res.data) == ("error", "native tool 't' exited with exit status: 1", "boom")
    assert native.tool_result("t", shell_result("")).status == "passed"
    res = native.tool_result("t", shell_result("plain words\n"))
    assert (res.status, res.summary, res.data) == ("passed", "native tool 't' completed", "plain words\n")


def test_the_input_is_upstreams_envelope():
    assert native.stdin_for('{"op":"x"}', None) == b'{"data": "{\\"op\\":\\"x\\"}", "log_path": null}'


def test_staging_writes_the_models_copy_and_the_runtimes_copy_executable(tmp_path):
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as zf:
        zf.writestr("murmur.yaml", "name: t\nversion: '1'\nruntime: tool\nimplementation: native\n")
        zf.writestr("bin/t", "#!/bin/sh\necho hi\n")
    (tmp_path / "t.mur.zip").write_bytes(data.getvalue())
    session = tmp_path / "ses"
    session.mkdir()
    res = SimpleNamespace(kind="store", path=tmp_path / "t.mur.zip", name="t")
    with Tree(tmp_path / "work", create=True) as tree:
        runtime_copy = native.stage(res, tree, session)
    staged = tmp_path / "work" / "t"
    assert runtime_copy == session / "bin" / "t"
    for path in (staged, runtime_copy):
        assert path.read_text() == "#!/bin/sh\necho hi\n" and stat.S_IMODE(path.stat().st_mode) == 0o755


def test_a_missing_payload_is_e_io_003(tmp_path):
    res = SimpleNamespace(kind="local", path=tmp_path, name="ghost")
    with Tree(tmp_path / "work", create=True) as tree, pytest.raises(MurError) as err:
        native.stage(res, tree, tmp_path)
    assert err.value.code == "E-IO-003" and "bin/ghost" in err.value.message


def test_the_sandbox_sees_native_tools_as_allowed_binaries_on_its_path(tmp_path):
    caps = SimpleNamespace(shell_allow=["bash"], limits="L")
    view = native.SandboxCaps(caps, ["fixture-tool", "bash"])
    assert view.shell_allow == ["bash", "fixture-tool"] and view.limits == "L"
    env = native.sandbox_env(tmp_path, {"PATH": "/usr/bin", "X": "1"})
    assert env["PATH"] == f"{tmp_path / 'bin'}{os.pathsep}/usr/bin" and env["X"] == "1"
    assert native.local_binary(Path("/nonexistent"), "t") is None
