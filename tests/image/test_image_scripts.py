"""The scripts inside a capsule image, run here with bash/sh: the healthcheck against a real A2A door
with a token, and the entrypoint's handling of a token given in the environment."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from mur.a2a.auth import DoorAuth
from mur.image import spec as S
from mur.testing.a2a_harness import HarnessFactory

TOKEN = "h3alth-Token_value.~+/="
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash (the image's healthcheck is bash)")


@pytest.fixture
def door(tmp_path, monkeypatch):
    monkeypatch.setenv("MURMUR_A2A_LINGER_SECS", "0")
    factory = HarnessFactory(tmp_path / "session")
    yield factory(service_kw={"auth": DoorAuth(token=TOKEN)}, task_acceptance="queue", after_task="sleep")
    factory.close()


def healthcheck(tmp_path: Path, door, **env: str) -> int:
    script = tmp_path / "mur-healthcheck"
    script.write_bytes(S.healthcheck_script())
    host, port = door.url.rsplit(":", 1)
    run = subprocess.run(["bash", str(script)], env={"PATH": os.environ["PATH"], "MUR_BIND": host, "MUR_PORT": port,
                                                     **env}, capture_output=True, text=True, timeout=30)
    return run.returncode


def test_the_healthcheck_presents_the_token_and_fails_without_it(tmp_path, door):
    good = tmp_path / "token"
    good.write_text(TOKEN + "\n")
    good.chmod(0o600)
    assert healthcheck(tmp_path, door, MURMUR_A2A_TOKEN_FILE=str(good)) == 0
    bare = tmp_path / "secret-token"  # a Kubernetes Secret's file: no final newline
    bare.write_text(TOKEN)
    bare.chmod(0o600)
    assert healthcheck(tmp_path, door, MURMUR_A2A_TOKEN_FILE=str(bare)) == 0
    assert healthcheck(tmp_path, door, MURMUR_A2A_TOKEN=TOKEN) == 0  # docker's healthcheck sees the configured env
    assert healthcheck(tmp_path, door, MURMUR_A2A_TOKEN="wrong") == 1  # the door answers 401
    assert healthcheck(tmp_path, door) == 1
    assert healthcheck(tmp_path, door, MURMUR_A2A_TOKEN_FILE=str(tmp_path / "absent")) == 1
    # TLS: bash cannot speak it, so only the port is checked
    assert healthcheck(tmp_path, door, MURMUR_A2A_TLS_CERT="/run/mur/tls.crt") == 0
    door.service.stop()
    assert healthcheck(tmp_path, door, MURMUR_A2A_TLS_CERT="/run/mur/tls.crt") == 1


def test_the_entrypoint_turns_a_token_in_the_env_into_a_private_file(tmp_path):
    """The serve script with its absolute paths moved under tmp_path and `mur` replaced by a reporter."""
    root = tmp_path / "root"
    fake_mur = tmp_path / "mur"
    fake_mur.write_text('#!/bin/sh\nprintf "file=%s env=%s\\n" "${MURMUR_A2A_TOKEN_FILE:-}" "${MURMUR_A2A_TOKEN:-unset}"\n'
                        'stat -c "%a %u" "$MURMUR_A2A_TOKEN_FILE"; cat "$MURMUR_A2A_TOKEN_FILE"\n')
    fake_mur.chmod(0o755)
    text = S.serve_script(()).decode().replace("/usr/local/bin/mur", str(fake_mur))
    for path in (S.SESSIONS_DIR, S.PAYLOADS_DIR, S.TOKEN_TMP_DIR):
        text = text.replace(path, f"{root}{path}")
    script = tmp_path / "mur-serve"
    script.write_text(text)

    def serve(**env: str) -> list[str]:
        run = subprocess.run(["sh", str(script)], env={"PATH": os.environ["PATH"], **env}, capture_output=True,
                             text=True, timeout=30)
        assert run.returncode == 0, run.stderr
        return run.stdout.splitlines()

    token_file = f"{root}{S.TOKEN_TMP_DIR}/token"
    assert serve(MURMUR_A2A_TOKEN=TOKEN) == [f"file={token_file} env=unset", f"600 {os.getuid()}", TOKEN]
    assert stat.S_IMODE(os.stat(f"{root}{S.TOKEN_TMP_DIR}").st_mode) == 0o700
    # a token file given as well wins, and the env copy is still dropped
    mine = tmp_path / "given"
    mine.write_text("given-token\n")
    mine.chmod(0o600)
    assert serve(MURMUR_A2A_TOKEN=TOKEN, MURMUR_A2A_TOKEN_FILE=str(mine)) == [
        f"file={mine} env=unset", f"600 {os.getuid()}", "given-token"]


def test_the_printed_docker_run_lines_carry_the_token_off_the_command_line():
    lines = S.run_lines("Hello World", "127.0.0.1:5000/hello:0.1.0", 8080)
    assert lines["token"] == '(umask 077; echo "MURMUR_A2A_TOKEN=$(openssl rand -hex 32)" > hello-world.a2a.env)'
    assert lines["serve"] == ("docker run -d --rm --name mur-hello-world -p 127.0.0.1:8080:8080 "
                              "--env-file hello-world.a2a.env 127.0.0.1:5000/hello:0.1.0")
    assert "mur send 127.0.0.1:8080" in lines["send"] and lines["stop"] == "docker stop mur-hello-world"
