"""Zero-downtime releases on a host: the deployment's front (mur.front) and a twin beside the service.

A deployment with a front keeps its URL on the front's port; the service (what `current` names, run
by the init system as always) listens on a private loopback port behind it. A new release never
restarts what serves. Instead:

    1. the twin: release n starts beside the serving one, on a third port, supervised like the
       service (`mur supervise run`, its own run/ and cgroup, its own copy of the tools' workdir);
    2. it must pass the gate (the authenticated health check, and the fleet's smoke task when there
       is one) before anything else changes: a broken release never takes the address;
    3. the front moves new requests to the twin; the service drains (the front follows its open
       tasks to their end and keeps their answers);
    4. the service restarts from `current` = n, now with nothing routed to it, passes the gate again,
       and the front moves back to it; the twin drains and is stopped.

Every step pushes its undo (mur.deploy.undo), so a failure or Ctrl-C leaves the previous release
serving through the front. Files, all under the deployment's root (destroy removes them):

    front/front.json state.json front.pid control.sock tasks.json    the front (mur.front.config)
    twin/release/   a view of releases/<n>: links, its own work/ and workdir/, the twin's service.json
    twin/run/ twin/tmp/   logs/front.log logs/twin.log

The front runs as the deploy user from the serving release's runtime; it is restarted (taking its
listening socket over from the old process, never closing it) when a release brings another runtime
or another certificate.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from typing import Any, Callable

from mur.deploy.init import init_for
from mur.deploy.init.supervisor import stop_command
from mur.deploy.procid import SH_ALIVE
from mur.deploy.steps import Layout
from mur.deploy.targets.base import Target
from mur.errors import MurError
from mur.front.config import Backend, FrontConfig
from mur.front.control import FrontControl, FrontError, retire, switch
from mur.front.control import standby as standby_role

# (target, port, token, pin) -> {"ok": bool, "error": str}: what a release must pass before it takes traffic
Gate = Callable[[Target, int, "str | None", "str | None"], dict]
DRAIN_TIMEOUT = 120.0


@dataclass(frozen=True)
class TwinLayout(Layout):
    """The twin's paths, shaped like a deployment's so the supervisor's stop and status commands apply."""

    base: str = ""

    @property
    def root(self) -> str:
        return f"{self.murmur}/deployments/{self.base}"

    @property
    def twin(self) -> str:
        return f"{self.root}/twin"

    @property
    def current(self) -> str:
        return f"{self.twin}/release"

    @property
    def run_dir(self) -> str:
        return f"{self.twin}/run"

    @property
    def log_file(self) -> str:
        return f"{self.log_dir}/twin.log"


def twin_layout(lay: Layout) -> TwinLayout:
    return TwinLayout(lay.home, f"{lay.dep_id}-twin", base=lay.dep_id)


def front_dir(lay: Layout) -> str:
    return f"{lay.root}/front"


@dataclass(frozen=True)
class Ports:
    front: int  # the stable address (the URL)
    service: int  # the service's private port (the record's service_port)
    twin: int  # the twin's, during a deploy


def front_start_command(lay: Layout, runtime: str) -> str:
    """Start the front from `runtime` (a release's `mur`) unless one runs; a successor takes the socket over."""
    q = shlex.quote
    d = front_dir(lay)
    return (f"{SH_ALIVE}; mkdir -p {q(lay.log_dir)}; cd / && MUR_RUNTIME_DIR={q(lay.runtime_dir)} setsid -f "
            f"{q(runtime)} front run --config {q(d + '/front.json')} </dev/null >>{q(lay.log_dir + '/front.log')} 2>&1")


def front_stop_command(lay: Layout) -> str:
    """SIGTERM the front (it finishes the requests under way, up to 30 s), then make sure."""
    q = shlex.quote
    pid = q(front_dir(lay) + "/front.pid")
    return (f"{SH_ALIVE}; if mur_alive {pid}; then p=$mur_pid; s=$mur_start; kill -TERM $p; i=0; "
            "while mur_same $p $s && [ $i -lt 350 ]; do sleep 0.1; i=$((i+1)); done; mur_same $p $s && kill -KILL $p; "
            f"fi; rm -f {pid}; true")


def front_alive_command(lay: Layout) -> str:
    return f"{SH_ALIVE}; mur_alive {shlex.quote(front_dir(lay) + '/front.pid')} && echo @@front=$mur_pid; true"


def twin_view_command(lay: Layout, n: int) -> str:
    """twin/release: every entry of releases/<n> linked, except what the twin must own (its tools'
    workdir, a copy; its session records; its service.json; no prestart, which sweeps the service's TMPDIR)."""
    q = shlex.quote
    tw, rel = twin_layout(lay), lay.release(n)
    view = tw.current
    return (f"rm -rf {q(tw.twin)} && mkdir -p {q(view)} {q(tw.run_dir)} {q(tw.twin + '/tmp')} && "
            f"chmod 700 {q(tw.twin + '/tmp')} && "
            f"for e in {q(rel)}/* {q(rel)}/.[!.]*; do [ -e \"$e\" ] || [ -L \"$e\" ] || continue; b=${{e##*/}}; "
            "case \"$b\" in work|workdir|service.json|prestart.sh|.smoke) continue;; esac; "
            f"ln -s \"$e\" {q(view)}/\"$b\"; done && cp -a {q(rel + '/work')} {q(view + '/work')} && "
            f"mkdir -p {q(view + '/workdir')}")


def twin_spec(release_spec: dict[str, Any], lay: Layout, port: int) -> dict[str, Any]:
    """The release's service.json, pointed at the twin's view, port, run dir, log and cgroup."""
    tw = twin_layout(lay)
    spec = json.loads(json.dumps(release_spec))
    spec.update({"deployment_id": tw.dep_id, "release_dir": tw.current, "port": port, "bind": "127.0.0.1",
                 "run_dir": tw.run_dir, "log_file": tw.log_file})
    spec.setdefault("cgroup", {})["name"] = tw.dep_id
    spec.setdefault("env", {})["TMPDIR"] = f"{tw.twin}/tmp"
    return spec


def twin_start_command(lay: Layout) -> str:
    q = shlex.quote
    tw = twin_layout(lay)
    return (f"cd / && MUR_RUNTIME_DIR={q(lay.runtime_dir)} setsid -f {q(tw.current + '/mur')} supervise run "
            f"--spec {q(tw.current + '/service.json')} </dev/null >>{q(tw.log_file)} 2>&1")


def twin_remove_command(lay: Layout) -> str:
    """Stop the twin (whatever is left of it) and remove its files."""
    tw = twin_layout(lay)
    return f"{stop_command(tw)}; rm -rf {shlex.quote(tw.twin)} {shlex.quote(tw.log_file)}; true"


def remove_command(lay: Layout) -> str:
    """Everything of the front and the twin, before a destroy removes the deployment's files."""
    return f"{twin_remove_command(lay)}; {front_stop_command(lay)}"


class Fronted:
    """One deployment's front and twin on a connected target (mur.deploy.providers.host drives it)."""

    def __init__(self, t: Target, lay: Layout, ports: Ports, *, sudo: bool, token: bytes | None, pin: str | None,
                 publish: bool, gate: Gate | None, reporter: Any, drain_timeout: float = DRAIN_TIMEOUT):
        self.t, self.lay, self.ports, self.sudo, self.pin = t, lay, ports, sudo, pin
        self.token = token.decode().strip() if token else None
        self.publish, self.gate_fn, self.r, self.drain_timeout = publish, gate, reporter, drain_timeout
        self.ctl = FrontControl(lambda cmd: t.run(cmd, check=False, what="the front").stdout, front_dir(lay))

    # --- the gate ---------------------------------------------------------------------------------------

    def gate(self, port: int, what: str) -> None:
        if self.gate_fn is not None:
            res = self.gate_fn(self.t, port, self.token, self.pin)
        else:
            from mur.deploy.providers.base import endpoint_check

            res = endpoint_check(self.t, port, self.token.encode() if self.token else None, self.pin, 15)
        if not res.get("ok"):
            raise MurError("E-DEPLOY-004", f"{what} did not pass the gate on {self.t.label}: {res.get('error')}",
                           "the release that served keeps serving; fix the capsule and deploy again")

    # --- the front --------------------------------------------------------------------------------------

    def config(self, active: Backend) -> FrontConfig:
        cur = self.ctl.config()
        base = FrontConfig(listen_port=self.ports.front, listen_host="0.0.0.0" if self.publish else "127.0.0.1",
                           token_file=self.lay.token_file(self.lay.current),
                           tls_cert=self.lay.tls_cert(self.lay.current) if self.pin else None,
                           tls_key=self.lay.tls_key(self.lay.current) if self.pin else None,
                           backend_pin=self.pin, drain_timeout=self.drain_timeout)
        if cur is None:
            return replace(base, backends=(active,))
        return replace(cur, listen_port=base.listen_port, listen_host=base.listen_host, token_file=base.token_file,
                       tls_cert=base.tls_cert, tls_key=base.tls_key, backend_pin=base.backend_pin)

    def alive(self) -> bool:
        return "@@front=" in self.t.run(front_alive_command(self.lay), check=False, what="the front").stdout

    def ensure(self, n: int) -> None:
        """The front serves the service (release n on its private port) and runs this release's runtime
        and certificate: started when absent, replaced (socket handed over) when it runs another."""
        main = Backend(f"release-{n}", self.ports.service)
        cfg = self.config(main)
        if cfg.active is None or (cfg.active.name, cfg.active.port) != (main.name, main.port) or len(cfg.backends) > 1:
            cfg = replace(cfg, backends=(main,), generation=cfg.generation + 1)
        state = self.ctl.state() or {}
        from mur import __version__

        runtime = f"{self.lay.current}/mur"
        fresh = not self.alive()
        stale = not fresh and (state.get("version") != self._runtime_version(n, __version__)
                               or (state.get("tls_pin") or None) != (self.pin or None))
        if self.twin_left():  # an interrupted deploy's twin: the service serves, the twin goes
            self.stop_twin()
        if fresh or stale:
            from mur.front.control import write_command

            self.t.run(write_command(front_dir(self.lay), cfg), check=True, what="write the front's configuration")
            before = state.get("pid")
            self.t.run(front_start_command(self.lay, runtime), check=True, what="start the front")
            try:
                self.ctl.wait(lambda st: st.get("pid") not in (None, before) and st.get("generation") == cfg.generation
                              and not st.get("handed_off"), cfg, 30)
            except FrontError as err:
                log = self.t.run(f"tail -n 20 {shlex.quote(self.lay.log_dir + '/front.log')}", check=False,
                                 what="the front's log").stdout.strip()
                raise MurError("E-DEPLOY-004", f"the front did not start on {self.t.label}: {err}\nfront log:\n{log}",
                               "see `mur deploy logs`; the release that served keeps serving") from err
        else:
            self._apply(cfg)

    def _runtime_version(self, n: int, fallback: str) -> str:
        out = self.t.run(f"cat {shlex.quote(self.lay.release(n) + '/release.json')} 2>/dev/null", check=False,
                         what="read the release").stdout
        try:
            return str(json.loads(out).get("bundle_version") or fallback)
        except ValueError:
            return fallback

    # --- a release beside the serving one -------------------------------------------------------------

    def start_twin(self, n: int, start_timeout: float) -> None:
        """Release n on the twin's port, supervised; waits until it is ready and passes the gate."""
        from mur.deploy.apply import apply_steps
        from mur.deploy.providers.base import wait_ready
        from mur.deploy.steps import Run, WriteFile

        t, lay = self.t, self.lay
        tw = twin_layout(lay)
        out = t.run(f"cat {shlex.quote(lay.release(n) + '/service.json')}", check=False, what="read the service spec")
        try:
            spec = twin_spec(json.loads(out.stdout), lay, self.ports.twin)
        except ValueError as exc:
            raise MurError("E-DEPLOY-004", f"release {n} on {t.label} has no readable service.json") from exc
        apply_steps(t, [Run(twin_remove_command(lay), sudo=self.sudo, check=False, label="remove an old twin"),
                        Run(twin_view_command(lay, n), label="prepare the twin"),
                        WriteFile(f"{tw.current}/service.json", (json.dumps(spec, indent=2) + "\n").encode(), 0o644),
                        Run(twin_start_command(lay), sudo=self.sudo, label="start the twin")])
        init = init_for("supervisor")

        def state():  # noqa: ANN202
            from mur.deploy.apply import run_step

            return init.parse_status(run_step(t, init.status(tw, self.sudo)).stdout)

        def probe(wait: float) -> dict:
            from mur.deploy.providers.base import endpoint_check

            return endpoint_check(t, self.ports.twin, self.token.encode() if self.token else None, self.pin, wait)

        card = wait_ready(state, probe, start_timeout)
        if not card.get("ok"):
            log = t.run(f"tail -n 40 {shlex.quote(tw.log_file)}", check=False, what="twin log").stdout
            raise MurError("E-DEPLOY-004", f"release {n} did not start beside the serving one on {t.label}: "
                           f"{card.get('error')}\ntwin log:\n{log.strip()[-2500:]}",
                           "the release that served keeps serving; fix the capsule and deploy again")
        self.gate(self.ports.twin, f"release {n}")

    def twin_left(self) -> bool:
        return self.t.run(f"test -e {shlex.quote(twin_layout(self.lay).twin)}", check=False, what="the twin").rc == 0

    def repair(self, serving: int) -> None:
        """Before a new twin: a front an interrupted command left pointing elsewhere (an old twin)
        goes back to the service that answers, so removing that twin refuses nothing."""
        cfg = self.ctl.config()
        main = Backend(f"release-{serving}", self.ports.service)
        if cfg is None or not self.alive() or (cfg.active is not None and cfg.active.port == main.port):
            return
        self.r.note(f"the front pointed at {cfg.active.name if cfg.active else 'nothing'}: back to release {serving}")
        self.back_to_service(serving)

    def stop_twin(self) -> None:
        from mur.deploy.apply import run_step
        from mur.deploy.steps import Run

        run_step(self.t, Run(twin_remove_command(self.lay), sudo=self.sudo, check=False, label="stop the twin"))

    def to_twin(self, n: int, serving: int) -> None:
        """New requests go to the twin (release n); the service (release `serving`) drains."""
        cfg = self.ctl.config()
        if cfg is None:
            raise MurError("E-DEPLOY-004", f"the front of {self.lay.dep_id} has no configuration on {self.t.label}")
        self._apply(switch(cfg, Backend(f"release-{n}-twin", self.ports.twin)))
        self.drain(f"release-{serving}", standby=True)  # the service stays the fallback until the end

    def to_service(self, n: int) -> None:
        """The service (restarted as release n) takes the address back; the twin drains and stops."""
        self.gate(self.ports.service, f"release {n}")
        cfg = self.ctl.config()
        assert cfg is not None
        self._apply(switch(cfg, Backend(f"release-{n}", self.ports.service)))
        cfg = self.ctl.config()
        assert cfg is not None
        for b in cfg.backends:  # the fallback was this very service (its old name): gone
            if b.role == "standby" and b.port == self.ports.service:
                self._apply(retire(cfg, b.name))
                cfg = self.ctl.config()
                assert cfg is not None
        self.drain(f"release-{n}-twin")
        self.stop_twin()

    def back_to_service(self, n: int) -> None:
        """Undo: the service (release n, still running or restarted) takes the address; no twin."""
        cfg = self.ctl.config()
        if cfg is not None and self.alive():
            main = Backend(f"release-{n}", self.ports.service)
            keep = tuple(replace(b, role="draining") for b in cfg.backends
                         if b.name != main.name and b.port != main.port and b.role != "standby")
            self._apply(replace(cfg, backends=(main, *keep), generation=cfg.generation + 1))
            for b in keep:
                self.drain(b.name, timeout=min(self.drain_timeout, 30.0))
        self.stop_twin()

    def drain(self, name: str, timeout: float | None = None, standby: bool = False) -> None:
        """Wait until backend `name` drained (or the drain timed out), then retire it from the front
        (`standby`: keep it as the fallback)."""
        try:
            self.ctl.wait_drained(name, timeout if timeout is not None else self.drain_timeout + 15)
        except FrontError as err:
            self.r.note(f"{name} did not drain: {err}")
        cfg = self.ctl.config()
        if cfg is not None and cfg.backend(name) is not None:
            self._apply(standby_role(cfg, name) if standby else retire(cfg, name))

    def _apply(self, cfg: FrontConfig) -> None:
        try:
            self.ctl.apply(cfg)
        except FrontError as err:
            raise MurError("E-DEPLOY-004", f"the front on {self.t.label} did not take the new configuration: {err}",
                           "the release that served keeps the address") from err

    # --- lifecycle ----------------------------------------------------------------------------------

    def stop(self) -> None:
        from mur.deploy.apply import run_step
        from mur.deploy.steps import Run

        run_step(self.t, Run(twin_remove_command(self.lay), sudo=self.sudo, check=False, label="stop the twin"))
        self.t.run(front_stop_command(self.lay), check=False, what="stop the front")

    def status(self) -> dict[str, Any]:
        state = self.ctl.state() or {}
        alive = self.alive()
        return {"port": self.ports.front, "alive": alive, "pid": state.get("pid") if alive else None,
                "backends": state.get("backends") or [], "error": state.get("error"),
                "counts": state.get("counts") or {}}


def recorded(dep: Any) -> dict[str, Any] | None:
    """The front a deployment record names ({"port": P}), or None (a deployment without one)."""
    return dep.front if dep is not None else None


def ports_for(dep_id: str, internal_port: int | None, existing: Any, want: bool, service_port: int | None,
              busy: set[int], where: str) -> Ports | None:
    """The front's, the service's and the twin's ports, or None when this deployment has no front.

    A front is chosen at a deployment's first deploy (`want`) and kept: the front takes the port the
    service would have had (network.internal_port when declared), the service a derived private one."""
    from mur.deploy.plan import choose_port, pick_port

    old = recorded(existing)
    if old is None and not (want and (existing is None or existing.release is None)):
        return None
    if old is not None:
        front = int(internal_port or old["port"])
        service = int(service_port or pick_port(dep_id, busy | {front}, salt=3))
    else:
        front = choose_port(dep_id, internal_port, None, busy, where)
        service = pick_port(dep_id, busy | {front}, salt=3)
    twin = pick_port(dep_id, busy | {front, service}, salt=2)
    return Ports(front=front, service=service, twin=twin)


def for_record(t: Target, lay: Layout, dep: Any, sudo: bool, token: bytes | None, reporter: Any,
               gate: Gate | None = None, busy: set[int] | None = None) -> Fronted | None:
    """The Fronted of a recorded deployment (None when it has no front)."""
    from mur.deploy.plan import pick_port

    front = recorded(dep)
    if front is None:
        return None
    service = int(dep.service_port or 0)
    twin = pick_port(dep.deployment_id, (busy or set()) | {int(front["port"]), service}, salt=2)
    return Fronted(t, lay, Ports(front=int(front["port"]), service=service, twin=twin), sudo=sudo, token=token,
                   pin=dep.tls_pin, publish=front.get("bind") == "0.0.0.0", gate=gate, reporter=reporter)


def install_boot(t: Target, lay: Layout, sudo: bool, boot: str) -> None:
    """After a reboot the front starts with the service: the cron hook's script starts both (a host
    whose service runs under systemd: see docs/deploy.md, "Fleets")."""
    if boot != "cron":
        return
    from mur.deploy.apply import apply_steps
    from mur.deploy.init.supervisor import boot_script
    from mur.deploy.steps import WriteFile

    script = boot_script(lay, sudo) + (front_start_command(lay, f"{lay.current}/mur") + "\n").encode()
    apply_steps(t, [WriteFile(lay.boot_script, script, 0o755)])
