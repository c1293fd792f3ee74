"""`mur run --explain-scope` remembered (mur.session.explain_memo), through the real CLI: a repeated
invocation is read back without the CLI framework or the manifest models, byte for byte what was
printed, and any change to what the report depends on computes it again.

A "doctored" entry (its report's mechanism rewritten) tells a read-back answer from a computed one.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from mur.sandbox import probecache
from mur.session import explain_memo

pytestmark = pytest.mark.skipif(not Path(probecache.BOOT_ID).exists(), reason="needs Linux's boot id")

DOCTORED = "doctored-mechanism"
MANIFEST = """name: memo
version: "0.1.0"
capabilities:
  env:
    allow: [HELLO_GREETING]
"""
# After the CLI exits: which heavy packages the process had loaded.
LOADED = ("import atexit, sys\n"
          "atexit.register(lambda: print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & "
          "{'typer', 'pydantic', 'yaml', 'mur'}), file=sys.stderr))\n"
          "from mur.cli.main import main\nmain()\n")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("memo-home")  # one probe measurement for the module


@pytest.fixture
def project(tmp_path):
    (tmp_path / "murmur.yaml").write_text(MANIFEST)
    return tmp_path


def base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MUR_", "MURMUR_"))}
    env["HOME"] = str(home)
    return env


def mur(home: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOADED, *args], capture_output=True, text=True,
                          env=env or base_env(home), cwd=cwd, timeout=120)


def memo_dir(home: Path) -> Path:
    return home / ".murmur" / "cache" / explain_memo.DIR_NAME


def entries(home: Path) -> set[Path]:
    return set(memo_dir(home).glob("*.json")) if memo_dir(home).is_dir() else set()


def explain(home: Path, project: Path, *extra: str, env: dict[str, str] | None = None):
    return mur(home, project, "run", "-m", "murmur.yaml", "--explain-scope", *extra, env=env)


def first_run(home: Path, project: Path, *extra: str, env: dict[str, str] | None = None) -> Path:
    """Run once (computed) and doctor the entry it left; returns the entry."""
    before = entries(home)
    done = explain(home, project, *extra, env=env)
    assert done.returncode == 0, done.stderr
    new = entries(home) - before
    assert len(new) == 1, new
    path = new.pop()
    data = json.loads(path.read_text())
    data["report"]["enforcement_tier"] = DOCTORED
    path.write_text(json.dumps(data))
    os.chmod(path, 0o600)
    return path


def stripped(stderr: str) -> str:
    return "".join(line + "\n" for line in stderr.splitlines() if not line.startswith("LOADED"))


def test_a_repeated_explanation_is_read_back_byte_for_byte_without_the_heavy_imports(home, project):
    (project / "murmur.yaml").write_text(MANIFEST + "colour: blue\n")  # an unknown key: W-MAN-001
    computed = explain(home, project, "--json")
    assert computed.returncode == 0, computed.stderr
    assert "warning[W-MAN-001]" in computed.stderr and "LOADED ['mur', 'pydantic', 'typer', 'yaml']" in computed.stderr
    again = explain(home, project, "--json")
    assert again.returncode == 0
    assert again.stdout == computed.stdout and stripped(again.stderr) == stripped(computed.stderr)
    assert "LOADED ['mur']" in again.stderr  # no typer, pydantic or yaml: read back
    assert json.loads(again.stdout)["env_allow"] == ["HELLO_GREETING"]


def test_the_entry_is_private_and_holds_nothing_of_the_environment(home, project):
    env = {**base_env(home), "SOME_TOKEN": "s3cret-value-in-the-environment"}
    path = first_run(home, project, env=env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(memo_dir(home).stat().st_mode) == 0o700
    assert b"s3cret-value" not in path.read_bytes()
    assert DOCTORED in explain(home, project, env=env).stdout  # and it is read back


@pytest.mark.parametrize("change", ["manifest", "dotenv", "global-config", "project-config", "environment",
                                    "working-directory", "arguments", "probe-answer", "probe-cache-off"])
def test_any_change_to_what_the_report_depends_on_computes_it_again(home, project, change, request):
    first_run(home, project)
    assert DOCTORED in explain(home, project).stdout  # unchanged: read back
    env, cwd, args = base_env(home), project, ["run", "-m", "murmur.yaml", "--explain-scope"]
    if change == "manifest":
        (project / "murmur.yaml").write_text(MANIFEST + "# edited\n")
    elif change == "dotenv":
        (project / ".env").write_text("HELLO_GREETING=Bonjour\n")
    elif change == "global-config":
        (home / ".murmur" / "config.yaml").write_text("containment: advisory\n")
        request.addfinalizer((home / ".murmur" / "config.yaml").unlink)
    elif change == "project-config":
        (project / ".murmur").mkdir()
        (project / ".murmur" / "config.yaml").write_text("containment: advisory\n")
    elif change == "environment":
        env["SOMETHING_ELSE"] = "1"
    elif change == "working-directory":
        cwd = project / "sub"
        cwd.mkdir()
        args[2] = str(project / "murmur.yaml")
    elif change == "arguments":
        args.append("--no-env-file")
    elif change == "probe-answer":
        probe_file = home / ".murmur" / "cache" / "probe" / probecache.file_name(os.geteuid())
        data = json.loads(probe_file.read_text())
        data["probe"]["systemd"] = not data["probe"]["systemd"]
        probe_file.write_text(json.dumps(data))
    elif change == "probe-cache-off":
        env[probecache.ENV] = "off"
    done = mur(home, cwd, *args, env=env)
    assert done.returncode == 0, done.stderr
    assert DOCTORED not in done.stdout and "LOADED ['mur', 'pydantic', 'typer', 'yaml']" in done.stderr


def test_nothing_is_remembered_with_the_probe_cache_off_or_after_a_failure(home, project):
    before = entries(home)
    off = {**base_env(home), probecache.ENV: "off"}
    assert explain(home, project, env=off).returncode == 0
    (project / "murmur.yaml").write_text("name: broken\n")  # no version: E-MAN-001
    for _ in range(2):
        failed = explain(home, project)
        assert failed.returncode == 1 and "error[E-MAN-001]" in failed.stderr
    assert entries(home) == before


@pytest.mark.parametrize("how", ["group-writable", "symlink"])
def test_an_entry_anyone_else_could_have_written_is_ignored(home, project, tmp_path_factory, how):
    path = first_run(home, project)
    if how == "group-writable":
        os.chmod(path, 0o620)
    else:
        elsewhere = tmp_path_factory.mktemp("elsewhere") / path.name
        elsewhere.write_bytes(path.read_bytes())
        os.chmod(elsewhere, 0o600)
        path.unlink()
        path.symlink_to(elsewhere)
    done = explain(home, project)
    assert done.returncode == 0 and DOCTORED not in done.stdout


def test_a_changed_module_makes_an_entry_stale(home, project, tmp_path, monkeypatch):
    """The code stamp: every loaded module outside the standard library, by size and mtime."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("MUR_CACHE_DIR", raising=False)
    monkeypatch.delenv(probecache.ENV, raising=False)
    module = tmp_path / "plugin_module.py"
    module.write_text("X = 1\n")
    monkeypatch.setitem(sys.modules, "plugin_module", types.SimpleNamespace(__file__=str(module)))
    from mur.sandbox import probe as host_probe

    monkeypatch.setattr(host_probe, "_cache", None)  # as a new process: read from (or written to) this HOME
    probe = host_probe.probe_host()
    invocation = explain_memo.Invocation.of(["run", "--explain-scope", "in-process"])
    recorder = invocation.recorder([project / "murmur.yaml"])
    report = {"enforcement_tier": DOCTORED}
    assert recorder.record("", report, True, probe)
    assert invocation.replay().report == report
    module.write_text("X = 22\n")
    assert invocation.replay() is None
    fake = types.SimpleNamespace(**{"not": "the host's probe"})
    assert not explain_memo.Recorder(invocation, recorder.inputs).record("", report, True, fake)


def test_the_cache_keeps_only_the_newest_entries(tmp_path, monkeypatch):
    home = tmp_path
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("MUR_CACHE_DIR", raising=False)
    monkeypatch.setattr(explain_memo, "KEEP", 3)
    from mur import privatecache

    for i in range(6):
        assert privatecache.write(explain_memo.DIR_NAME, f"{i:064x}.json", b"{}", keep=explain_memo.KEEP)
        os.utime(memo_dir(home) / f"{i:064x}.json", ns=(i * 10**9, i * 10**9))
    assert sorted(p.name for p in entries(home)) == [f"{i:064x}.json" for i in (3, 4, 5)]
