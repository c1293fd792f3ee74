"""The offline agent demo (examples/agent-demo) as an operator meets it: deployed as shipped, straight
from the checkout, to this machine, it reaches the loopback model server its manifest names, runs the
`greet` WASM tool and the sandboxed bash tool, and answers `mur send`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mur.testing.model_script import load_script
from mur.testing.modelserver import ModelServer

pytestmark = [pytest.mark.requires_landlock, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "agent-demo"
TASK = "Greet Ada, then say hi from the shell."


def mur(*args: str, home: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env={**os.environ, "HOME": str(home)})


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def model_8765():
    if not port_free(8765):
        pytest.skip("127.0.0.1:8765 (the demo's model server port) is taken on this machine")
    if not (DEMO / "driver" / "murmur-driver-anthropic.wasm").is_file() or not (DEMO / "greet" / "greet.wasm").is_file():
        built = subprocess.run([str(ROOT / "scripts" / "build-examples"), str(DEMO)], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr[-3000:]
    server = ModelServer(load_script(DEMO / "replies.yaml"), port=8765).start()
    yield server
    server.stop()


def test_the_agent_demo_deploys_as_shipped_and_answers(model_8765, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    before = subprocess.run(["git", "status", "--porcelain", "--ignored", str(DEMO)], capture_output=True, text=True,
                            cwd=ROOT).stdout
    res = mur("deploy", "-m", str(DEMO / "murmur.yaml"), "--no-boot-hook", "--json", home=home)
    assert res.returncode == 0, res.stderr[-3000:]
    dep = json.loads(res.stdout.strip().splitlines()[-1])
    try:
        sent = mur("send", dep["deployment_id"], TASK, home=home, timeout=600)
        assert sent.returncode == 0, sent.stderr[-3000:]
        assert sent.stdout.strip() == 'Greeted Ada ("Hello, Ada!") and the shell said "hi from the shell".'
        # the tools really ran in the deployed capsule: their results went back to the model
        results = json.dumps([r.body for r in model_8765.message_requests()])
        assert "Hello, Ada!" in results and "hi from the shell" in results
    finally:
        mur("deploy", "destroy", dep["deployment_id"], home=home)
    after = subprocess.run(["git", "status", "--porcelain", "--ignored", str(DEMO)], capture_output=True, text=True,
                           cwd=ROOT).stdout
    assert after == before  # deploying wrote nothing beside the manifest
