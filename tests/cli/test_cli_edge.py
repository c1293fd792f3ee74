"""The CLI edge: errors render once (`error[CODE]: message` + `  hint:`), exit 1; usage errors exit 2;
warnings are `warning[CODE]: ...` on stderr; no traceback ever reaches the user; `--help` stays light.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mur import __version__
from mur.cli.main import main

from mur_cli import run_mur

HEAVY = ("wasmtime", "paramiko", "docker", "httpx", "starlette", "uvicorn", "opentelemetry")


def mur(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "LANG": "C.UTF-8"}
    return subprocess.run([sys.executable, "-m", "mur", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=60)


def in_process(*args: str) -> tuple[int, str, str]:
    run = run_mur(*args)
    return run.code, run.out, run.err


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MUR_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_version(tmp_path):
    for flag in ("--version", "-V"):
        run = mur(flag, cwd=tmp_path)
        assert (run.returncode, run.stdout, run.stderr) == (0, f"mur {__version__}\n", "")


def test_help_lists_the_commands_without_importing_heavy_libraries(tmp_path):
    probe = (
        "import json, sys\n"
        "from mur.cli.main import main\n"
        "code = None\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
    )
    for args in (["--help"], ["run", "--help"], ["build", "--help"]):
        run = subprocess.run([sys.executable, "-c", probe, *args], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60)
        result = json.loads(run.stderr.strip().splitlines()[-1])
        assert result == {"code": 0, "heavy": []}, (args, run.stderr)
        if args == ["--help"]:
            commands = run.stdout.split("Commands:")[1]
            for name in ("run", "build"):
                assert f"\n  {name} " in commands
        if args == ["run", "--help"]:
            for flag in ("--manifest", "--explain-scope", "--json", "--containment"):
                assert flag in run.stdout


def test_usage_errors_exit_2_without_a_traceback(tmp_path):
    cases = [
        ([], "Usage: mur"),
        (["no-such-command"], "No such command 'no-such-command'"),
        (["run", "--manifest"], "Option '--manifest' requires an argument"),
        (["run", "--no-such-flag"], "No such option: --no-such-flag"),
    ]
    for args, text in cases:
        run = mur(*args, cwd=tmp_path)
        assert run.returncode == 2, (args, run.stderr)
        assert text in run.stdout + run.stderr, (args, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr
    assert not (tmp_path / "workdir").exists()


def test_an_unknown_flag_value_is_upstreams_e_io_003_not_a_usage_error(tmp_path):
    for flag, value, allowed in (("--containment", "paranoid", "advisory, scoped, sealed"),
                                 ("--lifecycle-task-acceptance", "many", "none, single, queue"),
                                 ("--lifecycle-after-task", "nap", "exit, sleep")):
        run = mur("run", flag, value, cwd=tmp_path)
        assert (run.returncode, run.stdout) == (1, ""), (flag, run.stderr)
        assert run.stderr == (f"error[E-IO-003]: {flag} must be one of: {allowed}; got '{value}'\n"
                              "  hint: `mur run --help` says what each means\n")
    assert not (tmp_path / "workdir").exists()


def test_a_mur_error_renders_once_with_its_hint_and_exits_1(tmp_path):
    run = mur("run", "--manifest", "missing.yaml", "--explain-scope", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == (
        "error[E-IO-001]: manifest not found: missing.yaml\n"
        "  hint: pass --manifest PATH, or run from the directory holding murmur.yaml\n"
    )


def test_warnings_precede_the_error_on_stderr(workdir):
    (workdir / "murmur.yaml").write_text('name: c\nversion: "1"\nnmae: typo\ncapabilities:\n  limits:\n    instances: 0\n')
    code, out, err = in_process("run", "--explain-scope", "--json")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == (
        "warning[W-MAN-001]: unrecognized key 'nmae' at the top level — did you mean 'name'? The key was parsed "
        "and ignored, so whatever it declared is not in effect")
    assert lines[1] == (
        "error[E-MAN-003]: murmur.yaml: invalid capability config for 'capabilities.limits.instances': "
        "must be greater than zero")
    assert lines[2].startswith("  hint: ") and len(lines) == 3


def test_an_unexpected_exception_becomes_e_internal(workdir, monkeypatch):
    from mur.session import prechecks

    def boom(opts):
        raise RuntimeError("boom")

    monkeypatch.setattr(prechecks, "explain_probed", boom)
    code, out, err = in_process("run", "--explain-scope")
    assert (code, out) == (1, "")
    assert err == (
        "error[E-INTERNAL]: unexpected RuntimeError: boom\n"
        "  hint: rerun with MUR_DEBUG=1 to see the traceback, and report it\n"
    )
    monkeypatch.setenv("MUR_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["run", "--explain-scope"])


GARBAGE = {
    "binary": b"\x00\x01\x02\xff\xfe",
    "not-utf8": b"name: caf\xe9\nversion: '1'\n",
    "empty": b"",
    "deep-nesting": b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "tab-indent": b"name: a\n\tversion: 1\n",
    "scalar-root": b"just a string\n",
    "bom": "\ufeffname: a\nversion: '1'\n".encode(),
    "huge-int-key": b"name: a\nversion: '1'\n99999999999999999999: x\n",
    "null-key": b"name: a\nversion: '1'\n~: x\n",
    "bool-key": b"name: a\nversion: '1'\ntrue: x\n",
    "complex-key": b"name: a\nversion: '1'\n? [a, b]\n: x\n",
    "float-inf": b"name: a\nversion: '1'\ninference: {transport: process, model: m, compaction: {threshold: .inf}}\n",
    "merge-key": b"base: &b {name: a}\n<<: *b\nversion: '1'\n",
    "binary-tag": b"name: !!binary aGVsbG8=\nversion: '1'\n",
    "set-tag": b"name: a\nversion: !!set {a, b}\n",
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_manifests_never_produce_a_traceback(workdir, name):
    (workdir / "murmur.yaml").write_bytes(GARBAGE[name])
    code, out, err = in_process("run", "--explain-scope", "--json")
    assert "Traceback" not in err and "E-INTERNAL" not in err, err
    if code == 0:  # a few of these are valid manifests (BOM, merge key, ...)
        json.loads(out)
    else:
        assert code == 1 and out == ""
        assert err.splitlines()[-1].startswith("error[E-") or "  hint: " in err.splitlines()[-1]


def test_a_directory_as_manifest_means_its_murmur_yaml(tmp_path):
    """`mur run -m DIR` reads DIR/murmur.yaml, as `mur build DIR` does; a DIR without one is E-IO-001."""
    (tmp_path / "dir.yaml").mkdir()
    run = mur("run", "--manifest", "dir.yaml", "--explain-scope", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.startswith("error[E-IO-001]: manifest not found: dir.yaml/murmur.yaml\n")
    (tmp_path / "dir.yaml" / "murmur.yaml").write_text('name: d\nversion: "1"\n')
    run = mur("run", "--manifest", "dir.yaml", "--explain-scope", "--json", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (0, "")
    assert json.loads(run.stdout)["declared_containment"] == "advisory"


@pytest.mark.parametrize("argv", [("run", "--explain-scope"), ("deploy", "--check"), ("image", "build"),
                                  ("export", "k8s", "--image", "x:1")], ids=lambda a: a[0])
def test_every_command_that_reads_a_capsule_takes_its_directory(tmp_path, argv):
    """`-m DIR` is DIR/murmur.yaml for each of them (deploy said "manifest not found: DIR", hintless)."""
    (tmp_path / "cap").mkdir()
    run = mur(*argv, "-m", "cap", cwd=tmp_path)
    assert run.returncode == 1
    error, hint = run.stderr.splitlines()[-2:]
    assert error.startswith("error[E-IO-001]: manifest not found: ") and error.endswith("cap/murmur.yaml"), run.stderr
    assert hint.startswith("  hint: ")


def test_errors_name_the_manifest_file_given(tmp_path):
    """`-m conf/m.yaml` errors say `conf/m.yaml:`; the hint names the YAML slip (unquoted number, yes/no)."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "m.yaml").write_text("name: x\nversion: 1.0\n")
    run = mur("run", "-m", "conf/m.yaml", "--explain-scope", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == (
        "error[E-MAN-003]: conf/m.yaml: field 'version' has invalid type (expected string, got number)\n"
        '  hint: quote it, e.g. version: "1.0" (unquoted, YAML reads 1.0 as a number)\n'
    )
    (tmp_path / "murmur.yaml").write_text('name: x\nversion: "1"\ncapabilities:\n  filesystem:\n    workdir_exec: no\n')
    run = mur("run", "--explain-scope", cwd=tmp_path)
    assert run.stderr == (
        "error[E-MAN-003]: murmur.yaml: field 'capabilities.filesystem.workdir_exec' has invalid type (expected boolean, got string)\n"
        "  hint: write workdir_exec: false (mur reads YAML 1.2, where only true and false are booleans)\n"
    )
