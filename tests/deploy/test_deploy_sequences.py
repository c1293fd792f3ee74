"""Deploy sequences as data: the host provider against a recording target (kamal's Printer model).

A small simulated host answers the commands by their labels (release.json, `current`, the
supervisor's state), so each scenario asserts what deploy *did*, in order: first deploy,
unchanged redeploy, smoke start, failed start and revert, rollback, preflight refusals, and
interrupts at each phase (nothing left, or an `incomplete` record that destroy removes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mur.deploy import operations
from mur.runtime.bundle import Bundle
from mur.deploy.providers.base import Context
from mur.deploy.request import DeployRequest
from mur.deploy.state import DeploymentStore
from mur.deploy.targets import TargetSpec
from mur.deploy.targets.base import Result
from mur.deploy.targets.recording import RecordingTarget
from mur.errors import MurError

SCOPED = {"achieved": "scoped", "mechanism": "landlock+seccomp", "tier": "full", "landlock_abi": 7, "seccomp": True,
          "cgroup_mode": "hybrid", "cgroup_delegated": True, "kernel": "6.1", "mur_version": "0.1.0"}


class FakeHost:
    """What a host without systemd answers, with just enough state to follow a deploy."""

    def __init__(self, target: RecordingTarget, *, cron: bool = True, start_ok: bool = True, smoke_ok: bool = True):
        self.t = target
        self.releases: dict[int, dict] = {}
        self.current: int | None = None
        self.up = False
        self.start_ok, self.smoke_ok = start_ok, smoke_ok
        t = target
        t.on("uname", stdout="Linux\nx86_64\n")
        t.on("root helper check", rc=1)  # not a prepared host: sudo -n sh -c
        t.on("sudo check", rc=0)
        t.on("find systemd", rc=1)
        t.on("find cron", rc=0 if cron else 1)
        t.on("disk space", stdout="Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/vda 1 1 99999999 1% /\n")
        t.on("probe", stdout=json.dumps(SCOPED) + "\n")
        t.on("read current release", self._current)
        t.on("service status", self._status)
        t.on("start supervisor", self._start)
        t.on("stop supervisor", self._stop)
        t.on("smoke start", lambda c: Result(0 if self.smoke_ok else 1,
                                             json.dumps({"ok": self.smoke_ok, "error": "boom", "stderr": "trace"}), ""))
        t.on("service log", stdout="[mur supervise] service exited with status 3\n")
        t.on("put", self._put)
        self._link = re.compile(r"ln -sfn releases/(\d+) ")

    def _put(self, call) -> None:
        if call.dst.endswith("/release.json"):
            n = int(call.dst.rsplit("/", 2)[-2])
            self.releases[n] = {"pending": True}

    def _current(self, call) -> Result:
        head = json.dumps(self.releases[self.current]) if self.current in self.releases else ""
        return Result(0, head + "\n@@mur@@\n" + "\n".join(str(n) for n in sorted(self.releases)) + "\n", "")

    def _status(self, call) -> Result:
        if not self.up:
            return Result(0, json.dumps({"state": "stopped"}) + "\n", "")
        if not self.start_ok:
            return Result(0, json.dumps({"state": "backoff", "restarts": 1}) + "\n@@alive=77\n", "")
        return Result(0, json.dumps({"state": "running", "url": "x", "restarts": 0}) + "\n@@alive=77\n", "")

    def _start(self, call) -> Result:
        self.up = True
        self.t.service.up = self.start_ok
        return Result(0, "", "")

    def _stop(self, call) -> Result:
        self.up = False
        self.t.service.up = False
        return Result(0, "", "")

    def settle(self) -> None:
        """What the files the deploy wrote mean (release.json content, the `current` link)."""
        for call in self.t.calls:
            m = self._link.search(call.cmd) if call.kind == "run" else None
            if m:
                self.current = int(m.group(1))
        for dst, data in self.t.files.items():
            if dst.endswith("/release.json"):
                self.releases[int(dst.rsplit("/", 2)[-2])] = json.loads(data)


@pytest.fixture
def env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "murmur.yaml").write_text('name: hello\nversion: "1.0.0"\nlifecycle:\n  task_acceptance: queue\n'
                                     '  after_task: sleep\n')
    (cap / "capsule.wasm").write_bytes(b"\0asm")
    runtime_file = tmp_path / "mur-0.1.0-linux-x86_64"
    runtime_file.write_bytes(b"#!/bin/sh\necho mur 0.1.0\n")
    runtime = Bundle(path=runtime_file, version="0.1.0", platform="linux-x86_64", sha256="b" * 64, size=25,
                     origin="build")
    return {"manifest": cap / "murmur.yaml", "runtime": runtime, "store": DeploymentStore(home / ".murmur" / "d.json")}


def run(env, target, **req_kw):
    req = DeployRequest(manifest=env["manifest"], target=TargetSpec("ssh", host="vm", user="deployer"),
                        start_timeout=3, **req_kw)
    ctx = Context(store=env["store"], connect=lambda *a, **k: target, runtime=lambda *a: env["runtime"],
                  precompile=lambda *a: (), timeout=3)
    return operations.deploy(req, ctx=ctx)


def deployed(env, **host_kw):
    """A host serving release 1 of the capsule, its calls cleared: (target, host, first result)."""
    t = RecordingTarget()
    host = FakeHost(t, **host_kw)
    first = run(env, t)
    host.settle()
    t.calls.clear()
    return t, host, first


def serving(env, first, n: int = 1) -> None:
    rec = env["store"].get(first["deployment_id"])
    assert rec.status == "running" and rec.release.n == n


def after(labels: list[str], *wanted: str) -> bool:
    """`wanted` appear in `labels` in this order (other labels may come between)."""
    it = iter(labels)
    return all(any(label == w for label in it) for w in wanted)


def test_first_deploy(env):
    t = RecordingTarget()
    FakeHost(t)
    res = run(env, t)
    labels = t.labels()
    assert after(labels, "uname", "root helper check", "sudo check", "find systemd", "find cron", "disk space", "probe",
                 "read current release", "listening ports", "create directories", "record references",
                 "stop supervisor", "start supervisor", "install boot hook", "service status", "prune old releases")
    assert "smoke start" not in labels  # nothing was serving
    rec = env["store"].get(res["deployment_id"])
    assert rec.status == "running" and rec.release.n == 1 and rec.boot == "cron" and rec.previous is None
    puts = {c.dst: c.mode for c in t.calls if c.kind == "put"}
    lay = f"/home/deployer/.murmur/deployments/{res['deployment_id']}"
    assert puts[f"{lay}/a2a-token"] == 0o600 and puts[f"{lay}/releases/1/env"] == 0o600
    assert t.files[f"{lay}/a2a-token"] == Path(rec.token_file).read_bytes().strip()  # the same token both ends
    assert oct(Path(rec.token_file).stat().st_mode & 0o777) == "0o600"
    assert "a2a-token" not in json.dumps(rec.to_dict()).replace(str(rec.token_file), "")  # path only, never the token
    # the supervisor's start went through sudo (the deploy user is not root) and so does the boot hook's script
    assert next(c for c in t.calls if c.what == "start supervisor").sudo
    assert b"sudo -n sh -c" in t.files[f"{lay}/boot.sh"]
    # the health check sent the deployment's token
    assert ("POST", "Bearer " + Path(rec.token_file).read_text().strip()) in t.service.requests
    assert res["tunnel"].startswith("ssh -N -L ") and res["url"] == f"http://127.0.0.1:{rec.tunnel_port}"
    assert f"-L {rec.tunnel_port}:127.0.0.1:{rec.service_port} " in res["tunnel"]  # a free local port, chosen here


def test_unchanged_redeploy_uploads_nothing_and_starts_nothing(env):
    t, host, first = deployed(env)
    again = run(env, t)
    assert again["unchanged"] and again["deployment_id"] == first["deployment_id"] and again["uploaded"] == 0
    assert [c for c in t.calls if c.kind == "put"] == [] or all("/bin/" in c.dst for c in t.calls if c.kind == "put")
    assert "start supervisor" not in t.labels() and "create directories" not in t.labels()[t.labels().index("probe"):]
    # down but unchanged: started again, still nothing uploaded
    host._stop(None)
    t.calls.clear()
    again = run(env, t)
    assert again["unchanged"] and after(t.labels(), "service status", "start supervisor", "service status")


def test_a_changed_release_is_smoke_started_beside_the_serving_one(env):
    t, host, first = deployed(env)
    second = run(env, t, env_args=("GREETING=Hola",))
    labels = t.labels()
    assert after(labels, "read current release", "create directories", "smoke start", "stop supervisor",
                 "start supervisor", "prune old releases")
    rec = env["store"].get(first["deployment_id"])
    assert second["release"] == 2 and rec.previous.n == 1 and rec.status == "running"


def test_a_release_that_fails_its_smoke_start_never_replaces_the_serving_one(env):
    t, host, first = deployed(env)
    host.smoke_ok = False
    with pytest.raises(MurError) as err:
        run(env, t, env_args=("GREETING=Hola",))
    assert err.value.code == "E-DEPLOY-004" and "previous release keeps serving" in err.value.hint
    labels = t.labels()
    assert "start supervisor" not in labels and not any("ln -sfn releases/2" in c.cmd for c in t.calls)
    assert after(labels, "smoke start", "stop the smoke start", "remove the new release")
    rec = env["store"].get(first["deployment_id"])
    assert rec.status == "running" and rec.release.n == 1  # the record is the serving one again


def test_a_failed_switch_reverts_to_the_previous_release(env):
    t, host, first = deployed(env)
    state = {"n": 0}

    def start_second_fails(call):
        state["n"] += 1
        host.start_ok = state["n"] > 1  # the new release crashes; the previous one, restarted, serves
        return host._start(call)

    t.on("start supervisor", start_second_fails)
    with pytest.raises(MurError) as err:
        run(env, t, env_args=("GREETING=Hola",))
    assert err.value.code == "E-DEPLOY-004" and "remote log" in err.value.message
    cmds = [c.cmd for c in t.calls]
    switched = next(i for i, c in enumerate(cmds) if "ln -sfn releases/2" in c)
    back = next(i for i, c in enumerate(cmds) if "ln -sfn releases/1" in c)
    assert switched < back and "remove the new release" in [c.what for c in t.calls[back:]]
    serving(env, first)


def test_a_first_deploy_that_does_not_start_leaves_nothing(env):
    t = RecordingTarget()
    FakeHost(t, start_ok=False)
    with pytest.raises(MurError) as err:
        run(env, t)
    assert err.value.code == "E-DEPLOY-004" and "exited during startup" in err.value.message
    assert after(t.labels(), "start supervisor", "service status", "service log", "stop supervisor",
                 "remove boot hook", "remove deployment files")
    assert env["store"].load() == []


@pytest.mark.parametrize("phase", ["probe", "listening ports", "create directories", "record references",
                                   "start supervisor", "service status", "prune old releases"])
def test_an_interrupt_at_any_phase_of_a_first_deploy_leaves_nothing(env, phase):
    t = RecordingTarget()
    FakeHost(t)
    original = dict(t._rules).get(phase)
    seen = {"n": 0}

    def interrupt(call):
        seen["n"] += 1
        if seen["n"] == (2 if phase == "create directories" else 1):  # the first is preflight's runtime cache
            raise KeyboardInterrupt
        return original(call) if callable(original) else (original or Result(0, "", ""))

    t.on(phase, interrupt)
    with pytest.raises(KeyboardInterrupt):
        run(env, t)
    assert env["store"].load() == []
    wrote = [i for i, c in enumerate(t.calls) if c.kind == "put" and "/deployments/" in c.dst]
    if wrote:  # something of the deployment reached the target: it was removed again
        assert "remove deployment files" in [c.what for c in t.calls[wrote[-1]:]]


def test_an_interrupt_with_the_connection_gone_leaves_an_incomplete_record_that_destroy_removes(env):
    t = RecordingTarget()
    FakeHost(t)
    gone = {"now": False}

    def drop(call):
        gone["now"] = True
        raise KeyboardInterrupt

    t.on("start supervisor", drop)
    def dead(call):
        if gone["now"]:
            raise MurError("E-DEPLOY-003", "deployer@vm: SSH command failed: connection lost")
        return Result(0, "", "")

    for label in ("stop supervisor", "remove boot hook", "remove deployment files", "stop the smoke start"):
        t.on(label, dead)
    with pytest.raises(KeyboardInterrupt):
        run(env, t)
    (rec,) = env["store"].load()
    assert rec.status == "incomplete" and rec.init == "supervisor" and rec.bundles == ["mur-0.1.0-linux-x86_64"]
    ctx = Context(store=env["store"], connect=lambda *a, **k: t2)
    t2 = RecordingTarget()
    FakeHost(t2)
    t2.on(f"test {rec.home}/.murmur/deployments/{rec.deployment_id}", rc=1)  # gone after destroy
    from mur.deploy.providers import provider_for

    provider_for("ssh").destroy(rec, ctx)
    assert after(t2.labels(), "stop supervisor", "remove boot hook", "remove deployment files",
                 "release mur-0.1.0-linux-x86_64")


def test_an_interrupted_redeploy_keeps_the_serving_release(env):
    t, host, first = deployed(env)
    t.on("smoke start", lambda call: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run(env, t, env_args=("GREETING=Hola",))
    assert "remove the new release" in t.labels() and "start supervisor" not in t.labels()
    serving(env, first)


def test_preflight_refusals_write_no_record_and_no_release(env):
    t = RecordingTarget()
    FakeHost(t, cron=False)
    with pytest.raises(MurError) as err:
        run(env, t)
    assert err.value.code == "E-DEPLOY-007" and "--no-boot-hook" in err.value.message
    assert env["store"].load() == []
    assert [c.dst for c in t.calls if c.kind == "put"] == ["/home/deployer/.murmur/bin/mur-0.1.0-linux-x86_64"]
    res = run(env, _with_host(cron=False), no_boot_hook=True)
    assert res["boot"] == "none"


def _with_host(**kw) -> RecordingTarget:
    t = RecordingTarget()
    FakeHost(t, **kw)
    return t


def test_rollback_switches_back_and_reverts_when_the_old_release_fails(env):
    t = RecordingTarget()
    host = FakeHost(t)
    first = run(env, t)
    host.settle()
    run(env, t, env_args=("GREETING=Hola",))
    host.settle()
    ctx = Context(store=env["store"], connect=lambda *a, **k: t, timeout=3)
    t.calls.clear()
    out = _rollback(first["deployment_id"], ctx)
    assert out.release.n == 1 and out.previous.n == 2
    assert any("ln -sfn releases/1" in c.cmd for c in t.calls)


def _rollback(ident, ctx):
    from mur.deploy.providers import provider_for

    dep = ctx.store.find(ident)
    return provider_for(dep.provider).rollback(dep, ctx)
