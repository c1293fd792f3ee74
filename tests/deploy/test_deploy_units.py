"""Rendered artifacts users and machines read: the systemd unit, the images/ files, the CLI edge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mur.deploy.init import init_for
from mur.deploy.init.systemd import render_unit
from mur.deploy.steps import Layout, ServiceConfig

ROOT = Path(__file__).resolve().parents[2]
DEP = "dep_0123456789abcdef0123456789abcdef"


def test_unit_delegates_restarts_and_runs_as_the_deploy_user():
    lay = Layout("/home/deployer", DEP)
    unit = render_unit(lay, ServiceConfig(port=2345, user="deployer", restart="on-failure",
                                          run_args=("--lifecycle-task-acceptance", "queue")), capsule="hello")
    lines = unit.splitlines()
    assert "Delegate=memory pids cpu io" in lines and "Restart=on-failure" in lines and "User=deployer" in lines
    assert "Environment=MURMUR_A2A_TIMEOUT_SECS=0" in lines
    assert f"EnvironmentFile=-/home/deployer/.murmur/deployments/{DEP}/current/env" in lines
    exec_start = next(x for x in lines if x.startswith("ExecStart="))
    assert exec_start == (f"ExecStart=/home/deployer/.murmur/deployments/{DEP}/current/mur run --manifest "
                          f"/home/deployer/.murmur/deployments/{DEP}/current/murmur.yaml --workdir "
                          f"/home/deployer/.murmur/deployments/{DEP}/current/work --json --bind 127.0.0.1 "
                          "--port 2345 --lifecycle-task-acceptance queue")
    assert "KillMode=mixed" in lines and "StandardOutput=journal" in lines
    assert "Environment=MUR_RUNTIME_DIR=/home/deployer/.murmur/runtime" in lines
    assert f"Environment=MURMUR_A2A_TOKEN_FILE=/home/deployer/.murmur/deployments/{DEP}/current/a2a-token" in lines
    assert f"Environment=TMPDIR=/home/deployer/.murmur/deployments/{DEP}/tmp" in lines
    assert f"ExecStartPre=/bin/sh /home/deployer/.murmur/deployments/{DEP}/current/prestart.sh" in lines
    assert "WantedBy=multi-user.target" in lines  # enabled: back after a reboot
    root_unit = render_unit(Layout("/root", DEP), ServiceConfig(port=1, restart="always"))
    assert "User=" not in root_unit and "Restart=always" in root_unit


def test_systemd_status_reads_properties_and_the_journal_line():
    systemd = init_for("systemd")
    lay = Layout("/root", DEP)
    cmd = systemd.status(lay, True)
    assert cmd.sudo and "_SYSTEMD_INVOCATION_ID" in cmd.cmd and '\'^{"url"\'' in cmd.cmd
    st = systemd.parse_status("ActiveState=active\nNRestarts=2\nMainPID=42\nbad line\nREADY=1\n")
    assert (st.state, st.running, st.ready, st.restarts, st.pid) == ("active", True, True, 2, 42)
    assert not systemd.parse_status("ActiveState=active\nMainPID=42\n").ready
    gone = systemd.parse_status("LoadState=not-found\nActiveState=inactive\n")
    assert gone.state == "absent" and gone.exited and not gone.running


def test_the_docker_files_in_images_are_the_ones_deploy_uses():
    assert os.access(ROOT / "images" / "build-base.sh", os.X_OK)
    profile = json.loads((ROOT / "images" / "seccomp-landlock.json").read_text())
    allowed = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" for n in rule["names"]}
    denied = {n for rule in profile["syscalls"] if rule["action"] != "SCMP_ACT_ALLOW" for n in rule["names"]}
    landlock = {"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"}
    assert landlock <= allowed
    assert not {"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"} & denied
    assert {"kexec_load", "init_module", "bpf"} <= denied


def test_the_single_file_runtime_unpacks_once_and_execs(tmp_path, monkeypatch):
    """assemble() wraps a one-dir build; the result runs with nothing but sh, tail and tar."""
    from mur.runtime.bundle import assemble

    onedir = tmp_path / "onedir"
    (onedir / "_internal").mkdir(parents=True)
    (onedir / "_internal" / "data.txt").write_text("payload")
    (onedir / "mur").write_text('#!/bin/sh\necho "runtime $* $(cat "$(dirname "$0")/_internal/data.txt") $$"\n')
    (onedir / "mur").chmod(0o755)
    out = assemble(onedir, tmp_path / "mur-9.9.9-linux-x86_64", "9.9.9", "linux-x86_64")
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    first = subprocess.run([str(out), "--version"], capture_output=True, text=True, env=env)
    assert first.returncode == 0 and first.stdout.startswith("runtime --version payload"), first.stderr
    unpacked = list((tmp_path / "home" / ".murmur" / "runtime").iterdir())
    assert [p.name.startswith("mur-9.9.9-linux-x86_64-") for p in unpacked] == [True]
    # exec: the runtime is the process itself, not a child of a wrapper
    proc = subprocess.Popen([str(out), "x"], stdout=subprocess.PIPE, text=True, env=env)
    line = proc.communicate()[0]
    assert line.split()[-1] == str(proc.pid)
    # byte-identical when rebuilt from the same tree (so an unchanged redeploy uploads nothing)
    again = assemble(onedir, tmp_path / "again", "9.9.9", "linux-x86_64")
    assert again.read_bytes() == out.read_bytes()


def mur(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True,
                          env={**os.environ, "HOME": str(home)}, timeout=120)


def test_cli_errors_are_rendered_with_codes(tmp_path):
    r = mur("deploy", "status", "dep_nope", home=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error[E-DEPLOY-008]: no deployment found with id 'dep_nope'")
    r = mur("deploy", "--host", "", "-m", str(tmp_path / "x.yaml"), home=tmp_path)
    assert r.returncode == 1 and "error[E-DEPLOY-001]: no host specified" in r.stderr
    r = mur("deploy", "-m", str(tmp_path / "missing.yaml"), home=tmp_path)
    assert r.returncode == 1 and "error[E-IO-001]" in r.stderr
    r = mur("deploy", "--init", "upstart", home=tmp_path)
    assert r.returncode == 2
    r = mur("deploy", "ls", "--json", home=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout) == []
    r = mur("deploy", "rollback", "x", home=tmp_path)
    assert "E-DEPLOY-008" in r.stderr


def test_upstream_aliases_ps_and_destroy(tmp_path):
    r = mur("ps", home=tmp_path)
    assert r.returncode == 0 and r.stdout == "no deployments\n"
    state = tmp_path / ".murmur" / "deployments.json"
    state.parent.mkdir(exist_ok=True)
    state.write_text(json.dumps([{"deployment_id": DEP, "provider": "local", "name": "hello", "status": "stopped",
                                  "url": "http://127.0.0.1:1"}]))
    r = mur("ps", home=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("DEPLOYMENT_ID") and DEP in r.stdout
    r = mur("destroy", "dep_nope", home=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error[E-DEPLOY-008]: no deployment found with id 'dep_nope'")
    r = mur("destroy", DEP, "--json", home=tmp_path)  # the alias is `mur deploy destroy ID`, --json included
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"deployment_id": DEP, "status": "destroyed", "provider": "local", "target": "local"}


def test_rollback_without_history_is_deploy_011(tmp_path):
    state = tmp_path / ".murmur" / "deployments.json"
    state.parent.mkdir()
    state.write_text(json.dumps([{"deployment_id": DEP, "provider": "local", "previous": None}]))
    r = mur("deploy", "rollback", DEP[:10], home=tmp_path)
    assert r.returncode == 1 and "error[E-DEPLOY-011]" in r.stderr and "complete releases: none" in r.stderr


def test_probe_command(tmp_path):
    r = mur("probe", "--json", home=tmp_path)
    report = json.loads(r.stdout)
    assert r.returncode == 0 and {"landlock_abi", "achieved", "cgroup_mode", "mur_version"} <= set(report)


def test_send_watch_cancel_take_the_token_and_pin_from_the_deployment_record(tmp_path, monkeypatch):
    from mur.cli.a2a import resolve_credentials
    from mur.deploy.state import Deployment, DeploymentStore
    from mur.deploy.targets import TargetSpec

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MURMUR_A2A_TOKEN", raising=False)
    token = tmp_path / "a2a-token"
    token.write_text("tok-from-record\n")
    token.chmod(0o600)
    DeploymentStore().save(Deployment(DEP, "ssh", TargetSpec("ssh", host="vm"), url="https://127.0.0.1:41000",
                                      token_file=str(token), tls_pin="ab" * 32))
    for target in (DEP[:10], "https://127.0.0.1:41000", "127.0.0.1:41000"):
        url, creds = resolve_credentials(target, None, None, None, None)
        assert url == "https://127.0.0.1:41000" and creds.token == "tok-from-record" and creds.pin_sha256 == "ab" * 32
    url, creds = resolve_credentials(DEP, "explicit", None, None, None)  # what the user gives wins
    assert creds.token == "explicit"
    url, creds = resolve_credentials("http://127.0.0.1:9", None, None, None, None)  # not a deployment
    assert url == "http://127.0.0.1:9" and creds.token is None


def test_every_deploy_command_takes_json_and_status_reads_as_words():
    """docs/deploy.md: every command takes --json (logs too); human status shows no Python values."""
    import typer
    from typer.main import get_command

    from mur.cli.deploy import _human_status, register

    app = typer.Typer()
    register(app)
    root = get_command(app)
    group = root.commands["deploy"]
    assert "--json" in {o for p in group.params for o in p.opts}
    for name, cmd in group.commands.items():
        assert "--json" in {o for p in cmd.params for o in p.opts}, name
    for name in ("ps", "destroy"):
        assert "--json" in {o for p in root.commands[name].params for o in p.opts}, name
    text = _human_status({"deployment_id": DEP, "name": "hello", "version": "1", "provider": "ssh", "status": "failed",
                          "url": "http://127.0.0.1:1", "tunnel": None, "agent_card_ok": False, "error": None,
                          "release": 1, "previous": None, "init": "supervisor", "boot": None,
                          "service": {"state": "dead", "running": False, "ready": False, "restarts": 0, "pid": None,
                                      "started_at": 1764633600.123}})
    assert "answers   no" in text and "previous -" in text
    assert not any(word in text for word in ("True", "False", "None", "1764633600"))
