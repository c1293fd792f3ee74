"""`mur new capsule|tool|agent NAME` builds and runs offline: real componentize-py builds (about a
minute each the first time, cached by input hash after), and the agent's driver (the examples'
first-party one) against the real loopback model server replaying the scaffold's replies.yaml."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mur.testing.model_script import load_script
from mur.scaffold.new import MODEL_SERVER_MODULE

ModelServer = importlib.import_module(MODEL_SERVER_MODULE).ModelServer  # the server the scaffold names

pytestmark = pytest.mark.skipif(
    not (Path(sys.executable).parent / "componentize-py").exists(), reason="needs componentize-py (mur[guest])")


def _mur(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
           "MUR_CACHE_DIR": os.environ.get("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))}
    return subprocess.run([sys.executable, "-m", "mur", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_agent_scaffold_answers_from_the_model_server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert _mur("new", "agent", "helper", cwd=tmp_path, home=home).returncode == 0
    project = tmp_path / "helper"
    server = ModelServer(load_script(project / "replies.yaml"))
    server.start()
    try:
        port = server.url.rsplit(":", 1)[1].rstrip("/")
        manifest = project / "murmur.yaml"  # the scaffold's fixed port may be taken here: use the server's
        manifest.write_text(manifest.read_text().replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
        build = _mur("build", "helper", cwd=tmp_path, home=home)
        assert build.returncode == 0, build.stderr
        run = _mur("run", "-m", "helper", "-t", "Say hello", "--json", cwd=tmp_path, home=home)
        assert run.returncode == 0, run.stderr
    finally:
        server.stop()
    result = next((project / "workdir").glob("ses_*/out/result.txt")).read_text()
    assert result.startswith("Hello from helper!")
    assert len(server.message_requests()) == 1 and "Say hello" in json.dumps(server.message_requests()[0].body)


@pytest.mark.slow
def test_the_capsule_and_tool_scaffolds_build_and_run(tmp_path):
    """`mur new`, `mur build`, `mur run` as the printed next steps say; the results are the templates'."""
    home = tmp_path / "home"
    home.mkdir()
    for kind, run_dir in (("capsule", "c"), ("tool", "t/demo")):
        name = run_dir.split("/")[0]
        assert _mur("new", kind, name, cwd=tmp_path, home=home).returncode == 0
        for target in dict.fromkeys([name, run_dir]):
            build = _mur("build", target, cwd=tmp_path, home=home)
            assert build.returncode == 0, build.stderr
        run = _mur("run", "-m", run_dir, "-t", "Ada", "--json", cwd=tmp_path, home=home)
        assert run.returncode == 0, run.stderr
        result = next((tmp_path / run_dir / "workdir").glob("ses_*/out/result.txt")).read_text()
        assert result == ("c was asked: Ada\n" if kind == "capsule" else "ADA\n")
