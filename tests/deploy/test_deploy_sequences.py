"""Deploy sequences as data: the host provider against a recording target (kamal's Printer model).

A small simulated host answers the commands by their labels and keeps just enough state to follow
a deploy: releases (complete once committed), `current`, which release the service process runs,
the lock. Each scenario asserts what deploy *did*, in order, and what is true afterwards: first
deploy, unchanged redeploy, repair, smoke start, failed start and switch back, rollback from the
target's complete releases, the lock, and interrupts at each step (nothing left, or an
`incomplete` record saying what is left, which the next deploy repairs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mur.deploy import operations
from mur.deploy.deadlines import Deadlines
from mur.deploy.providers.base import Context
from mur.deploy.request import DeployRequest
from mur.deploy.state import DeploymentStore
from mur.deploy.targets import TargetSpec
from mur.deploy.targets.base import Result
from mur.deploy.targets.recording import RecordingTarget
from mur.errors import MurError
from mur.runtime.bundle import Bundle

SCOPED = {"achieved": "scoped", "mechanism": "landlock+seccomp", "tier": "full", "landlock_abi": 7, "seccomp": True,
          "cgroup_mode": "hybrid", "cgroup_delegated": True, "kernel": "6.1", "mur_version": "0.1.0"}
FAST = Deadlines(undo=5.0)
STARTS = {"start supervisor", "restart supervisor"}


class FakeHost:
    """What a host without systemd answers, with the state a deploy changes."""

    def __init__(self, target: RecordingTarget, *, cron: bool = True, start_ok: bool = True, smoke_ok: bool = True):
        self.t = target
        self.releases: dict[int, dict] = {}
        self.current: int | None = None
        self.previous: int | None = None
        self.serving: int | None = None  # the release the service process runs
        self.up = False
        self.start_ok, self.smoke_ok = start_ok, smoke_ok
        self.leftovers: list[str] = []
        t = target
        t.on("uname", stdout="Linux\nx86_64\n")
        t.on("root helper check", rc=1)  # not a prepared host: sudo -n sh -c
        t.on("sudo check", rc=0)
        t.on("find systemd", rc=1)
        t.on("find cron", rc=0 if cron else 1)
        t.on("disk space", stdout="Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/vda 1 1 99999999 1% /\n")
        t.on("probe", stdout=json.dumps(SCOPED) + "\n")
        t.on("observe the deployment", self._observe)
        t.on("sweep leftovers", self._sweep)
        t.on("service status", self._status)
        t.on("start supervisor", self._start)
        t.on("stop supervisor", self._stop)
        t.on("restart supervisor", self._restart)
        t.on("smoke start", lambda c: Result(0 if self.smoke_ok else 1,
                                             json.dumps({"ok": self.smoke_ok, "error": "boom", "stderr": "trace"}), ""))
        t.on("service log", stdout="[mur supervise] service exited with status 3\n")
        t.on("remove deployment files", self._remove_all)
        t.on("remove the new release", self._remove_new)
        t.exists = lambda path: bool(self.releases) if "/deployments/" in path else False  # type: ignore[method-assign]
        self._link = re.compile(r"ln -sfn releases/(\d+) ")

    def _observe(self, call) -> Result:
        lines = [f"@@current releases/{self.current}" if self.current is not None else "@@current "]
        if self.previous is not None:
            lines.append(f"@@previous releases/{self.previous}")
        lines += [f"@@release {n} {json.dumps(meta)}" for n, meta in sorted(self.releases.items())]
        lines += [f"@@staging {x}" for x in self.leftovers]
        root = re.search(r"cd (/home/deployer/\.murmur/deployments/dep_[0-9a-f]+)", call.cmd)
        if self.serving is not None and root and re.search(r"printf '%04X' \d+", call.cmd):
            lines.append(f"@@serving 77 {root.group(1)}/releases/{self.serving}")
        if not self.releases and self.current is None:
            lines = ["@@absent"] + lines[1:]
        return Result(0, "\n".join(lines) + "\n", "")

    def _sweep(self, call) -> Result:
        out = "".join(f"@@swept staging/{x}\n" for x in self.leftovers)
        self.leftovers = []
        return Result(0, out, "")

    def _status(self, call) -> Result:
        if not self.up:
            return Result(0, json.dumps({"state": "stopped"}) + "\n", "")
        if not self.start_ok:
            return Result(0, json.dumps({"state": "backoff", "restarts": 1, "last_exit": 3}) + "\n@@alive=77\n", "")
        return Result(0, json.dumps({"state": "running", "url": "x", "restarts": 0}) + "\n@@alive=77\n", "")

    def _start(self, call) -> Result:
        if "already running" in call.cmd and self.up:
            pass
        self.up = True
        self.serving = self.current
        self.t.service.up = self.start_ok
        return Result(0, "", "")

    def _restart(self, call) -> Result:
        self._stop(call)
        return self._start(call)

    def _stop(self, call) -> Result:
        self.up, self.serving = False, None
        self.t.service.up = False
        return Result(0, "", "")

    def _remove_all(self, call) -> Result:
        self.releases, self.current, self.serving, self.up = {}, None, None, False
        return Result(0, "", "")

    def _remove_new(self, call) -> Result:
        m = re.search(r"releases/(\d+)'?; fi", call.cmd) or re.search(r"!= releases/(\d+)", call.cmd)
        n = int(m.group(1)) if m else None
        if n is not None and n != self.current:
            self.releases.pop(n, None)
        return Result(0, "", "")

    def settle(self) -> None:
        """Apply what the calls since the last settle did (links, commits)."""


def track(host: FakeHost) -> None:
    """Follow `current` and commits as they happen (every run call passes through here)."""
    t = host.t
    original = t._exec

    def exec_(cmd, timeout, stdin):
        m = host._link.search(cmd)
        if m and "/current" in cmd:
            host.current = int(m.group(1))
        elif m and "/previous" in cmd:
            host.previous = int(m.group(1))
        c = re.search(r"mv -T (\S+) (\S+/releases/(\d+)) ", cmd)
        if c:
            host.releases[int(c.group(3))] = json.loads(t.files[c.group(1) + "/release.json"])
        return original(cmd, timeout, stdin)

    t._exec = exec_


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


def ctx_for(env, target, **kw) -> Context:
    return Context(store=env["store"], connect=lambda *a, **k: target, runtime=lambda *a: env["runtime"],
                   precompile=lambda *a: (), timeout=3, deadlines=FAST, **kw)


def run(env, target, ctx_kw=None, **req_kw):
    req = DeployRequest(manifest=env["manifest"], target=TargetSpec("ssh", host="vm", user="deployer"),
                        start_timeout=3, **req_kw)
    return operations.deploy(req, ctx=ctx_for(env, target, **(ctx_kw or {})))


def host_for(**kw) -> tuple[RecordingTarget, FakeHost]:
    t = RecordingTarget()
    host = FakeHost(t, **kw)
    track(host)
    return t, host


def deployed(env, **host_kw):
    """A host serving release 1 of the capsule, its calls cleared: (target, host, first result)."""
    t, host = host_for(**host_kw)
    first = run(env, t)
    t.calls.clear()
    return t, host, first


def record(env, first):
    return env["store"].get(first["deployment_id"])


def after(labels: list[str], *wanted: str) -> bool:
    """`wanted` appear in `labels` in this order (other labels may come between)."""
    it = iter(labels)
    return all(any(label == w for label in it) for w in wanted)


def test_first_deploy(env):
    t, host = host_for()
    res = run(env, t)
    labels = t.labels()
    assert after(labels, "uname", "sweep leftovers", "root helper check", "sudo check", "find systemd", "find cron",
                 "disk space", "probe", "observe the deployment", "listening ports", "create directories",
                 "record references", "commit release 1", "restart supervisor", "install boot hook",
                 "service status", "observe the deployment", "prune old releases")
    assert not [x for x in labels if x.startswith("link ") and x.endswith("/current")]  # no switch of its own
    assert "smoke start" not in labels  # nothing was serving
    assert t.labels("hold") == ["lock"] and t.locks_held == 0  # the lock was taken and let go
    assert "flock -s" in t.holds[0].cmd  # with the host's shared lock: it writes shared files
    rec = record(env, res)
    assert rec.status == "running" and rec.release.n == 1 and rec.boot == "cron" and rec.previous is None
    assert rec.pending is None and host.current == host.serving == 1
    puts = {c.dst: c.mode for c in t.calls if c.kind == "put"}
    stage = f"/home/deployer/.murmur/staging/{res['deployment_id']}/release-1-"
    token = next(d for d in puts if d.startswith(stage) and d.endswith("/a2a-token"))
    assert puts[token] == 0o600 and puts[token.replace("a2a-token", "env")] == 0o600
    assert t.files[token] == Path(rec.token_file).read_bytes().strip()  # the same token both ends
    assert oct(Path(rec.token_file).stat().st_mode & 0o777) == "0o600"
    assert "a2a-token" not in json.dumps(rec.to_dict()).replace(str(rec.token_file), "")  # path only, never the token
    # the supervisor's start went through sudo (the deploy user is not root) and so does the boot hook's
    # script; the switch of `current` went with it, in the same command, as the deploy user
    restart = next(c for c in t.calls if c.what == "restart supervisor")
    assert restart.sudo
    sent = next(x for x in t.sent if "kill -TERM" in x and "ln -sfn releases/1 " in x)
    assert sent.index("ln -sfn releases/1 ") < sent.index("sudo -n sh -c") < sent.index("kill -TERM")
    lay = f"/home/deployer/.murmur/deployments/{res['deployment_id']}"
    assert b"sudo -n sh -c" in t.files[f"{lay}/boot.sh"]
    # the health check sent the deployment's token
    assert ("POST", "Bearer " + Path(rec.token_file).read_text().strip()) in t.service.requests
    assert res["tunnel"].startswith("ssh -N -L ") and res["url"] == f"http://127.0.0.1:{rec.tunnel_port}"
    assert f"-L {rec.tunnel_port}:127.0.0.1:{rec.service_port} " in res["tunnel"]  # a free local port, chosen here


def test_unchanged_redeploy_uploads_nothing_and_starts_nothing(env):
    t, host, first = deployed(env)
    again = run(env, t)
    assert again["unchanged"] and again["deployment_id"] == first["deployment_id"] and again["uploaded"] == 0
    assert not again["repaired"]
    assert all("/bin/" in c.dst for c in t.calls if c.kind == "put")  # (this fake has no sha256sum)
    assert not STARTS & set(t.labels()) and "commit release 2" not in t.labels()


def test_a_stopped_unchanged_service_is_repaired_never_reported_unchanged(env):
    t, host, first = deployed(env)
    host._stop(None)
    again = run(env, t)
    assert not again["unchanged"] and "release 1 was not serving" in again["repaired"]
    assert after(t.labels(), "observe the deployment", "restart supervisor", "service status")
    assert host.serving == 1 and record(env, first).status == "running"


def test_the_old_version_serving_after_a_cut_switch_is_repaired(env):
    """The link was cut after `current` was switched, before the restart: release 2 is current,
    release 1 serves. Redeploying release 2 must restart it, not answer `unchanged`."""
    t, host, first = deployed(env)
    run(env, t, env_args=("GREETING=Hola",))
    assert host.current == host.serving == 2
    host.serving = 1  # what a restart never done leaves serving
    t.calls.clear()
    again = run(env, t, env_args=("GREETING=Hola",))
    assert not again["unchanged"] and again["repaired"] == "release 1 was serving while current names release 2"
    assert host.serving == 2 and again["release"] == 2 and again["status"] == "running"
    # and status says what was true before the repair: diverged
    host.serving = 1
    out = operations.status(first["deployment_id"], ctx=ctx_for(env, t))
    assert out["status"] == "diverged" and out["state"]["serving"] == 1 and out["state"]["current"] == 2


def test_a_changed_release_is_smoke_started_beside_the_serving_one(env):
    t, host, first = deployed(env)
    second = run(env, t, env_args=("GREETING=Hola",))
    labels = t.labels()
    assert after(labels, "observe the deployment", "create directories", "commit release 2", "smoke start",
                 "restart supervisor", "prune old releases")
    rec = record(env, first)
    assert second["release"] == 2 and rec.previous.n == 1 and rec.status == "running" and host.serving == 2


def lose_the_link_after(t, sent_when) -> None:
    """The link dies right after the first command for which `sent_when(cmd)` holds went out (the
    target ran it), and stays down: nothing after it reaches the target, no undo, no reconnect."""
    sent = t._exec
    lost = MurError("E-DEPLOY-003", "deployer@vm: SSH command failed: connection lost")

    def exec_(cmd, timeout, stdin):
        if not t.is_alive:
            raise lost
        res = sent(cmd, timeout, stdin)
        if sent_when(cmd):
            t.is_alive = False
            raise lost
        return res

    def reconnect(budget=None):
        raise lost

    t._exec, t.reconnect = exec_, reconnect  # type: ignore[method-assign]


def test_a_link_lost_once_the_restart_was_sent_leaves_a_release_serving(env):
    """The link dies right after the target stopped the serving supervisor, and stays down (no undo
    can reach). The restart was two commands once, and this left nothing serving until the next
    deploy; whatever went out with the stop must start the service too."""
    t, host, first = deployed(env)
    # this command stopped the serving supervisor
    lose_the_link_after(t, lambda cmd: "kill -TERM" in cmd and 2 in host.releases)
    with pytest.raises(MurError) as err:
        run(env, t, env_args=("GREETING=Hola",))
    assert err.value.code == "E-DEPLOY-003"
    assert host.up and host.serving == host.current == 2
    assert record(env, first).status == "incomplete"  # and the record does not claim the switch happened


@pytest.mark.parametrize("command", ["deploy", "rollback"])
def test_a_link_lost_right_after_the_switch_leaves_current_naming_what_serves(env, command):
    """The link dies the moment `current` names the new release, and stays down (no undo can reach).
    The switch and the restart were two commands once: this left the old release serving under a
    `current` that named the new one (`diverged`) until the next deploy. Sent as one, they both ran."""
    t, host, first = deployed(env)
    if command == "rollback":
        run(env, t, env_args=("GREETING=Hola",))
        assert host.current == host.serving == 2
    to = 2 if command == "deploy" else 1
    lose_the_link_after(t, lambda cmd: f"ln -sfn releases/{to} " in cmd and "/current" in cmd)
    with pytest.raises(MurError) as err:
        if command == "deploy":
            run(env, t, env_args=("GREETING=Hola",))
        else:
            operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))
    assert err.value.code == "E-DEPLOY-003"
    assert host.up and host.current == host.serving == to


def test_a_release_that_fails_its_smoke_start_never_replaces_the_serving_one(env):
    t, host, first = deployed(env)
    host.smoke_ok = False
    with pytest.raises(MurError) as err:
        run(env, t, env_args=("GREETING=Hola",))
    assert err.value.code == "E-DEPLOY-004" and "previous release keeps serving" in err.value.hint
    labels = t.labels()
    assert not STARTS & set(labels) and not any("ln -sfn releases/2" in c.cmd for c in t.calls)
    assert after(labels, "smoke start", "stop the smoke start", "remove the new release")
    rec = record(env, first)
    assert rec.status == "running" and rec.release.n == 1 and rec.pending is None  # the record is the serving one
    assert host.serving == 1 and 2 not in host.releases


def test_a_failed_switch_reverts_to_the_previous_release(env):
    t, host, first = deployed(env)
    state = {"n": 0}

    def start_second_fails(call):
        state["n"] += 1
        host.start_ok = state["n"] > 1  # the new release crashes; the previous one, restarted, serves
        return host._restart(call)

    t.on("restart supervisor", start_second_fails)
    with pytest.raises(MurError) as err:
        run(env, t, env_args=("GREETING=Hola",))
    assert err.value.code == "E-DEPLOY-004" and "remote log" in err.value.message
    assert "exited during startup" in err.value.message and "last exit status 3" in err.value.message
    cmds = [c.cmd for c in t.calls]
    switched = next(i for i, c in enumerate(cmds) if "ln -sfn releases/2" in c and "/current" in c)
    back = next(i for i, c in enumerate(cmds) if "ln -sfn releases/1" in c and "/current" in c)
    assert switched < back and "remove the new release" in [c.what for c in t.calls[back:]]
    assert host.current == host.serving == 1 and record(env, first).release.n == 1


def test_a_first_deploy_that_does_not_start_leaves_nothing(env):
    t, host = host_for(start_ok=False)
    with pytest.raises(MurError) as err:
        run(env, t)
    assert err.value.code == "E-DEPLOY-004" and "exited during startup" in err.value.message
    assert after(t.labels(), "restart supervisor", "service status", "service log", "stop supervisor",
                 "remove boot hook", "remove deployment files", "collect unused shared files")
    assert env["store"].load() == [] and t.lock_files_removed >= 1


@pytest.mark.parametrize("phase", ["probe", "observe the deployment", "listening ports", "create directories",
                                   "commit release 1", "restart supervisor", "service status", "prune old releases"])
def test_an_interrupt_at_any_phase_of_a_first_deploy_leaves_nothing(env, phase):
    t, host = host_for()
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
    assert env["store"].load() == []  # no record: nothing of it is left
    wrote = [i for i, c in enumerate(t.calls) if c.kind == "put" and "/staging/" in c.dst]
    if wrote:  # something of the deployment reached the target: it was removed again
        assert "remove deployment files" in [c.what for c in t.calls[wrote[-1]:]]
    assert "collect unused shared files" in t.labels()  # and the runtime it may have uploaded for nothing
    assert t.locks_held == 0


def test_an_interrupt_with_the_connection_gone_leaves_a_record_that_says_what_is_left(env):
    t, host = host_for()
    gone = {"now": False}

    def drop(call):
        gone["now"] = True
        t.is_alive = False
        raise KeyboardInterrupt

    t.on("restart supervisor", drop)

    def dead(call):
        if gone["now"]:
            raise MurError("E-DEPLOY-003", "deployer@vm: SSH command failed: connection lost")
        return Result(0, "", "")

    for label in ("stop supervisor", "remove boot hook", "remove deployment files", "stop a smoke start"):
        t.on(label, dead)
    with pytest.raises(KeyboardInterrupt):
        run(env, t)
    (rec,) = env["store"].load()
    assert rec.status == "incomplete" and rec.pending["command"] == "deploy"
    assert "remove everything of the deployment from the target" in rec.pending["left"]
    assert "mur deploy destroy" in rec.pending["repair"] and t.reconnects == 1  # the undo tried a fresh connection
    t2, host2 = host_for()
    from mur.deploy.providers import provider_for

    provider_for("ssh").destroy(rec, ctx_for(env, t2))
    assert after(t2.labels(), "stop supervisor", "remove boot hook", "remove deployment files", "drop references",
                 "collect unused shared files")
    assert t2.holds[0].sent.index(b"r") >= 0  # the lock files went before the collection (still held)
    assert t2.lock_files_removed == 1


def test_the_undo_regains_the_lock_on_a_fresh_connection_and_finishes(env):
    t, host, first = deployed(env)

    def cut(call):
        t.is_alive = False  # the link died during the smoke start
        raise MurError("E-DEPLOY-003", "deployer@vm: the link went silent during smoke-start release 2")

    t.on("smoke start", cut)
    with pytest.raises(MurError) as err:
        run(env, t, env_args=("GREETING=Hola",))
    assert "went silent" in err.value.message
    assert t.reconnects == 1 and t.labels("hold") == ["lock", "lock"]  # a fresh connection, the lock again
    assert "remove the new release" in t.labels() and 2 not in host.releases
    rec = record(env, first)
    assert rec.status == "running" and rec.release.n == 1 and rec.pending is None


def test_the_undo_stops_when_another_command_took_the_lock_meanwhile(env):
    t, host, first = deployed(env)

    def cut(call):
        t.is_alive = False
        t.lock_previous = '1000 {"token": "someone-else", "command": "mur deploy"}'
        raise MurError("E-DEPLOY-003", "deployer@vm: the link went silent")

    t.on("smoke start", cut)
    with pytest.raises(MurError):
        run(env, t, env_args=("GREETING=Hola",))
    assert "remove the new release" not in t.labels()  # never undo over another command's work
    rec = record(env, first)
    assert rec.status == "incomplete" and "another command took" in rec.pending["why"]


def test_an_interrupted_redeploy_keeps_the_serving_release(env):
    t, host, first = deployed(env)
    t.on("smoke start", lambda call: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run(env, t, env_args=("GREETING=Hola",))
    assert "remove the new release" in t.labels() and not STARTS & set(t.labels())
    rec = record(env, first)
    assert rec.status == "running" and rec.release.n == 1 and host.serving == 1


def test_leftovers_of_a_killed_deploy_are_swept_and_never_counted(env):
    t, host, first = deployed(env)
    host.leftovers = ["release-2-dead"]
    second = run(env, t, env_args=("GREETING=Hola",))
    assert second["release"] == 2  # the killed attempt's number is free again: only complete releases count
    assert t.labels().index("sweep leftovers") < t.labels().index("preflight") if "preflight" in t.labels() else True


def test_preflight_refusals_write_no_record_and_no_release(env):
    t, host = host_for(cron=False)
    with pytest.raises(MurError) as err:
        run(env, t)
    assert err.value.code == "E-DEPLOY-007" and "--no-boot-hook" in err.value.message
    assert env["store"].load() == []
    assert [c.dst for c in t.calls if c.kind == "put"] == ["/home/deployer/.murmur/bin/mur-0.1.0-linux-x86_64"]
    assert "collect unused shared files" in t.labels() and t.lock_files_removed == 1  # the runtime and locks go
    t2, _ = host_for(cron=False)
    res = run(env, t2, no_boot_hook=True)
    assert res["boot"] == "none"


def test_a_held_lock_fails_at_once_naming_the_holder_and_changes_nothing(env):
    t, host, first = deployed(env)
    t.lock_holder = ('1000 {"host": "laptop", "user": "ann", "pid": 4242, "command": "mur deploy rollback dep_x", '
                     '"started": "2024-01-01T00:00:00Z", "token": "x"}')
    before = record(env, first).to_dict()
    with pytest.raises(MurError) as err:
        run(env, t, env_args=("GREETING=Hola",))
    assert err.value.code == "E-DEPLOY-013"
    assert "`mur deploy rollback dep_x` (pid 4242 on laptop, user ann" in err.value.message
    assert "--lock-wait" in err.value.hint
    assert not [c for c in t.calls if c.kind == "put"] and "preflight" not in t.labels()
    assert record(env, first).to_dict() == before


def test_rollback_finds_its_release_on_the_target_and_records_the_version_rolled_back_to(env):
    t, host = host_for()
    first = run(env, t)
    (env["manifest"]).write_text(env["manifest"].read_text().replace('"1.0.0"', '"1.1.0"'))
    second = run(env, t)
    assert second["version"] == "1.1.0" and host.serving == 2
    # a record that lost its history (a kill -9 before it was saved): the target still knows
    env["store"].update(first["deployment_id"], lambda d: setattr(d, "previous", None))
    t.calls.clear()
    out = operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))
    assert out["release"] == 1 and out["previous"] == 2 and out["version"] == "1.0.0"
    assert any("ln -sfn releases/1" in c.cmd for c in t.calls) and host.serving == 1
    status = operations.status(first["deployment_id"], ctx=ctx_for(env, t))
    assert status["status"] == "running" and status["version"] == "1.0.0" and status["release"] == 1
    assert host.previous == 2  # the target's own history: what served before
    again = operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))  # back to what served before
    assert again["release"] == 2 and again["version"] == "1.1.0" and host.serving == 2
    assert operations.rollback(first["deployment_id"], to=1, ctx=ctx_for(env, t))["release"] == 1
    with pytest.raises(MurError) as err:
        operations.rollback(first["deployment_id"], to=7, ctx=ctx_for(env, t))
    assert err.value.code == "E-DEPLOY-011" and "complete releases: 1, 2" in err.value.message


def test_rollback_goes_to_what_served_before_not_to_the_next_number(env):
    """1 served; 2 was deployed and rolled back; 3 was deployed (its switch recorded that 1 served):
    rollback goes to 1, not to 2."""
    t, host, first = deployed(env)
    run(env, t, env_args=("GREETING=Two",))
    operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))
    run(env, t, env_args=("GREETING=Three",))
    assert host.serving == 3 and host.previous == 1
    back = operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))
    assert back["release"] == 1 and host.serving == 1


def test_nothing_to_roll_back_to(env):
    t, host, first = deployed(env)
    with pytest.raises(MurError) as err:
        operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))
    assert err.value.code == "E-DEPLOY-011" and "complete releases: 1" in err.value.message


def test_status_of_an_interrupted_deploy_is_incomplete_until_the_target_is_consistent(env):
    t, host, first = deployed(env)
    env["store"].update(first["deployment_id"], lambda d: (setattr(d, "status", "incomplete"),
                                                           setattr(d, "pending", {"command": "deploy"})))
    host.leftovers = ["release-2-abcd"]
    out = operations.status(first["deployment_id"], ctx=ctx_for(env, t))
    assert out["status"] == "incomplete" and out["state"]["left"] == ["staging/release-2-abcd"]
    host.leftovers = []
    out = operations.status(first["deployment_id"], ctx=ctx_for(env, t))
    assert out["status"] == "running" and record(env, first).pending is None  # the record follows the truth


def test_a_complete_release_with_this_digest_is_switched_to_not_copied_again(env):
    t, host, first = deployed(env)
    run(env, t, env_args=("GREETING=Hola",))
    operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))
    assert host.serving == 1
    t.calls.clear()
    again = run(env, t, env_args=("GREETING=Hola",))
    assert again["release"] == 2 and host.serving == 2 and not again["unchanged"]
    assert "commit release 2" not in t.labels() and "commit release 3" not in t.labels()
    assert not [c for c in t.calls if c.kind == "put" and "/staging/" in c.dst]
    assert after(t.labels(), "smoke start", "restart supervisor")  # still proven beside what serves first


def test_a_committed_release_an_undo_could_not_remove_keeps_the_record_incomplete(env):
    """A deploy cut off after its commit, whose undo could not reach the target (a silent link,
    kill -9): release 2 is complete beside release 1, which serves. Status says what is left (not
    `running`, which would drop it from the record) until the next deploy takes release 2 up."""
    t, host, first = deployed(env)
    host.releases[2] = dict(host.releases[1], n=2)
    pending = {"command": "deploy", "release": 2, "phase": "staged", "left": ["remove the new release 2"]}
    env["store"].update(first["deployment_id"], lambda d: (setattr(d, "status", "incomplete"),
                                                           setattr(d, "pending", pending)))
    out = operations.status(first["deployment_id"], ctx=ctx_for(env, t))
    assert out["status"] == "incomplete" and "remove the new release 2" in out["state"]["reason"], out
    assert record(env, first).pending == pending and host.serving == 1
    again = run(env, t, env_args=("GREETING=Three",))
    out = operations.status(first["deployment_id"], ctx=ctx_for(env, t))
    assert out["status"] == "running" and out["release"] == again["release"] and record(env, first).pending is None


def test_rollback_after_a_repair_goes_to_what_served_before_the_cut_deploy(env):
    """The fault suite's history: 1 served; 2 was deployed and rolled back; 3 was cut between its
    switch and its restart (1 kept serving) and repaired by the next deploy: rollback goes to 1."""
    t, host, first = deployed(env)
    run(env, t, env_args=("GREETING=Two",))
    operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))
    run(env, t, env_args=("GREETING=Three",))
    assert host.current == host.serving == 3
    host.serving = 1  # the restart after the switch never happened
    again = run(env, t, env_args=("GREETING=Three",))
    assert again["repaired"] and host.serving == 3
    back = operations.rollback(first["deployment_id"], ctx=ctx_for(env, t))
    assert back["release"] == 1 and host.serving == 1
