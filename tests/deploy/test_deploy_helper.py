"""Elevation on a prepared host: privileged steps go through the root helper's fixed subcommands
(never `sudo -n sh -c`), steps without one run as the user, and preflight prefers the helper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mur.deploy.apply import apply_steps, run_step
from mur.resolve.shipped import ship
from mur.deploy.init import init_for
from mur.deploy.cleanup import destroy_steps
from mur.deploy.preflight import preflight_host
from mur.deploy.steps import Layout
from mur.deploy.targets.base import HELPER
from mur.deploy.targets.recording import RecordingTarget
from mur.runtime.bundle import Bundle

DEP = "dep_" + "a" * 32
SCOPED = {"achieved": "scoped", "mechanism": "landlock+seccomp", "tier": "full", "landlock_abi": 4,
          "mur_version": "0.1.0", "cgroup_mode": "unified", "cgroup_delegated": False, "netns": True}


def target(helper: bool) -> RecordingTarget:
    t = RecordingTarget()
    t.helper = helper
    return t


def test_systemd_steps_go_through_the_helper_and_nothing_else_is_elevated():
    lay = Layout("/home/deployer", DEP)
    systemd = init_for("systemd")
    t = target(helper=True)
    apply_steps(t, [*systemd.start(lay, True, restart=True), *systemd.stop(lay, True), *systemd.remove(lay, True)])
    run_step(t, systemd.status(lay, True))
    run_step(t, systemd.logs(lay, 50, False, True))
    apply_steps(t, destroy_steps(lay, "systemd", True))
    helper_calls = [c for c in t.sent if c.startswith("sudo")]
    assert helper_calls[:6] == [f"sudo -n {HELPER} {sub}" for sub in (
        f"install-unit {DEP}", f"restart {DEP}", f"stop {DEP}", f"remove {DEP}", f"status {DEP}", f"logs {DEP} 50")]
    assert all(c.startswith(f"sudo -n {HELPER} ") for c in helper_calls)
    assert not any("sh -c" in c for c in t.sent)
    # the deployment's files are the user's own there: removed without elevation
    assert any(c == f"rm -rf {lay.root} {lay.staging}" for c in t.sent)


def test_without_the_helper_sudo_wraps_the_whole_step():
    lay = Layout("/home/deployer", DEP)
    t = target(helper=False)
    apply_steps(t, init_for("systemd").stop(lay, True))
    assert t.sent == [f"sudo -n sh -c 'systemctl stop {lay.unit_name} 2>/dev/null; true'"]


def _host(t: RecordingTarget, helper_rc: int, systemd: bool, shell_rc: int = 0) -> None:
    t.on("uname", stdout="Linux\nx86_64\n")
    t.on("root helper check", rc=helper_rc, stdout="mur-deploy-helper 1\n")
    t.on("sudo check", rc=shell_rc)  # sudo -n sh -c true
    t.on("find systemd", rc=0 if systemd else 1)
    t.on("find cron", rc=0)
    t.on("disk space", stdout="Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/vda 1 1 99999999 1% /\n")
    t.on("probe", stdout=json.dumps(SCOPED) + "\n")


@pytest.mark.parametrize("helper_rc,shell_rc,systemd,init_pref,sudo,init,cgroup_privileged", [
    (0, 1, True, "auto", "helper", "systemd", True),
    (0, 1, True, "supervisor", "none", "supervisor", False),  # the helper does units only
    (0, 0, True, "supervisor", "nopasswd", "supervisor", True),  # sudo allows a shell too: a root supervisor
    (1, 0, True, "auto", "nopasswd", "systemd", True),
])
def test_preflight_prefers_the_helper(tmp_path, monkeypatch, helper_rc, shell_rc, systemd, init_pref, sudo, init,
                                      cgroup_privileged):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "capsule.wasm").write_bytes(b"\0asm")
    (tmp_path / "cap" / "murmur.yaml").write_text('name: cap\nversion: "1.0.0"\n'
                                                  "capabilities:\n  shell:\n    allow: [sh]\n")
    runtime = tmp_path / "mur-0.1.0-linux-x86_64"
    runtime.write_bytes(b"x")
    bundle = Bundle(path=runtime, version="0.1.0", platform="linux-x86_64", sha256="b" * 64, size=1, origin="build")
    t = RecordingTarget()
    _host(t, helper_rc, systemd, shell_rc)
    rep = preflight_host(t, bundle, ship(tmp_path / "cap" / "murmur.yaml"), dep_id=DEP, init_pref=init_pref)
    assert (rep.facts["sudo"], rep.facts["init"]) == (sudo, init)
    # a supervisor run as the user on cgroup v2 without delegation gets no service cgroup
    assert rep.facts["cgroup_sessions"] is cgroup_privileged
    assert ("sudo check" in t.labels()) is (helper_rc != 0 or init == "supervisor")
