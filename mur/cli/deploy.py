"""`mur deploy`: run a capsule as a supervised service on this machine, an SSH host or Docker.

    mur deploy [--host H | --docker] [OPTIONS]     deploy or redeploy (default target: this machine)
    mur deploy --check [--json]                    preflight only
    mur deploy ls | status ID | logs ID [-f] | start ID | stop ID | destroy ID | rollback ID [--to N]
    mur deploy gc [ID...] [--host H | --docker]    sweep what interrupted commands left

Commands that change a target take `--lock-wait SECONDS` (default 0: fail at once, E-DEPLOY-013,
when another command holds the deployment). `MUR_DEPLOY_EVENTS=FILE` appends one JSON line per
step (begin/end/fail) for tests that act at a given step.

`mur supervise run|smoke` (hidden) is the on-target half: the supervisor and smoke starts.
This module only parses, calls one function of mur.deploy.operations and renders.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional

import typer

from mur.cli.options import Manifest
from mur.cli.render import StepReporter, emit, emit_json

INITS = ("auto", "systemd", "supervisor")
CLASSES = ("advisory", "scoped", "sealed")


def _text(value: Any) -> str:
    """A value as a person reads it: no True/None/float reprs."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _reach_lines(r: dict) -> list[str]:
    """An SSH deployment on the host's loopback: `mur send ID` opens its own forward (mur.remote.reach);
    the printed tunnel is for other clients, which then use the url."""
    if not r.get("tunnel"):
        return []
    return [f"  reach     mur send {r.get('deployment_id')} \"<task>\"   (send, watch and cancel open their own "
            "SSH forward)",
            f"  tunnel    {r['tunnel']}   (for other clients: then use the url above)"]


def _human_deploy(r: dict) -> str:
    lines = [f"∞ {r.get('name')} {r.get('version')}", f"  url       {r.get('url')}"]
    lines += _reach_lines(r)
    lines.append(f"  dep       {r.get('deployment_id')}")
    if r.get("container"):
        lines.append(f"  container {r['container']} ({r.get('image')})")
    if r.get("unchanged"):
        lines.append(f"  release   {_text(r.get('release'))} unchanged: nothing uploaded")
    elif r.get("repaired"):
        lines.append(f"  release   {_text(r.get('release'))} repaired: {r['repaired']}")
    else:
        uploaded = f" ({r['uploaded']} files uploaded)" if r.get("uploaded") is not None else ""
        lines.append(f"  release   {_text(r.get('release'))}{uploaded}")
    lines.append(f"  service   {r.get('init')} · boot {r.get('boot')} · mur {r.get('mur_version')}")
    lines.append(f"  token     {r.get('token_file')}   (mur send takes it from the record)")
    if r.get("tls_pin"):
        lines.append(f"  tls pin   sha256 {r['tls_pin']}")
    lines.append(f"  time      {_text(r.get('elapsed'))}s")
    return "\n".join(lines) + "\n"


def _human_status(r: dict) -> str:
    svc = r.get("service") or {}
    truth = r.get("state") or {}
    lines = [f"{r.get('deployment_id')}  {r.get('name')} {r.get('version')}  ({r.get('provider')})",
             f"  status    {r.get('status')}" + (f"  ({truth['reason']})" if truth.get("reason") else ""),
             f"  url       {r.get('url')}"]
    lines += _reach_lines(r)
    last = f" · last exit {svc['last_exit']}" if svc.get("last_exit") not in (None, "") else ""
    lines += [f"  service   {_text(svc.get('state'))} · {_text(svc.get('restarts') or 0)} restarts{last}"
              + (f" · pid {svc['pid']}" if svc.get("pid") else ""),
              f"  answers   {_text(r.get('agent_card_ok'))}" + (f" ({r['error']})" if r.get("error") else "")]
    if r.get("provider") != "docker":
        lines.append(f"  release   current {_text(truth.get('current'))} · serving {_text(truth.get('serving'))} · "
                     f"record {_text(r.get('release'))} (previous {_text(r.get('previous'))})")
    else:
        lines.append(f"  release   {_text(r.get('release'))} (previous {_text(r.get('previous'))})")
    front = r.get("front")
    if front:  # mur.deploy.fronted: the address clients use, and where it sends them
        active = next((b["name"] for b in front.get("backends") or [] if b.get("role") == "active"), "-")
        lines.append(f"  front     port {front['port']} · " + (f"serving {active}" if front.get("alive") else "not running"))
    for item in truth.get("left") or []:
        lines.append(f"  left      {item}")
    if truth.get("locked_by"):
        lines.append(f"  locked    by {truth['locked_by'].get('command')}")
    lines.append(f"  init      {r.get('init')} · boot {_text(r.get('boot'))}")
    return "\n".join(lines) + "\n"


def _human_result(r: dict) -> str:
    parts = [f"{r.get('deployment_id')} {r.get('status')}"]
    if r.get("release") is not None:
        parts.append(f"release {r['release']}")
    if r.get("url") and r.get("status") == "running":
        parts.append(r["url"])
    return " · ".join(parts) + "\n"


def _human_gc(r: dict) -> str:
    lines = []
    for t in r.get("targets") or []:
        lines.append(f"{t['target']}: {len(t['removed'])} removed" + (f", {len(t['skipped'])} skipped" if t["skipped"] else ""))
        lines += [f"  - {x}" for x in t["removed"]] + [f"  skipped {x}" for x in t["skipped"]]
    return "\n".join(lines or ["nothing to collect"]) + "\n"


def _events() -> Callable[..., None]:
    """`MUR_DEPLOY_EVENTS=FILE`: one JSON line per step, appended and flushed as it happens.
    `MUR_DEPLOY_STOP_AT=step:event[,...]` (fault tests): after writing that event the command stops
    itself (SIGSTOP), so a test can act at exactly that point (kill -9 it, cut its link, fill the
    disk) and then let it go on (SIGCONT) or not."""
    path = os.environ.get("MUR_DEPLOY_EVENTS")
    stops = {x.strip() for x in os.environ.get("MUR_DEPLOY_STOP_AT", "").split(",") if x.strip()}
    if not path and not stops:
        return lambda name, **fields: None
    fh = open(path, "a", buffering=1, encoding="utf-8") if path else None  # noqa: SIM115 - lives with the command

    def emit(name: str, **fields: Any) -> None:
        if fh is not None:
            try:
                fh.write(json.dumps({"t": round(time.time(), 3), "pid": os.getpid(), "event": name, **fields}) + "\n")
                fh.flush()
            except (OSError, ValueError):
                pass
        if f"{fields.get('step')}:{name}" in stops:
            import signal

            os.kill(os.getpid(), signal.SIGSTOP)
    return emit


def _context(lock_wait: float = 0.0, timeout: float | None = None) -> Any:
    from mur.deploy.deadlines import current
    from mur.deploy.plan import port_range
    from mur.deploy.providers.base import Context

    deadlines = current()
    port_range()  # a bad MUR_DEPLOY_PORTS fails here, before any connection
    return Context(reporter=StepReporter(), lock_wait=lock_wait, event=_events(), deadlines=deadlines,
                   timeout=timeout if timeout is not None else deadlines.start)


def _op(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one operation. A Ctrl-C that got out of it did its work (the undo ran, the record says
    what is left): from then on the command only ends, so a further Ctrl-C is ignored instead of
    killing the interpreter half-way through its exit."""
    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise


LOCK_WAIT_HELP = "Wait up to SECONDS for another command's lock on the deployment (default 0: fail at once)."

# Options more than one command takes, spelled once.
DepId = Annotated[str, typer.Argument(metavar="ID")]
JsonOut = Annotated[bool, typer.Option("--json", help="One JSON line.")]
LockWait = Annotated[float, typer.Option("--lock-wait", min=0, metavar="SECONDS", help=LOCK_WAIT_HELP)]
Only = Annotated[List[str], typer.Option("--only", help="A fleet: only these targets or groups.")]
Force = Annotated[bool, typer.Option("--force", help="Forget it even if the remote cleanup fails.")]
SshUser = Annotated[Optional[str], typer.Option(
    "--ssh-user", show_default=False, help="SSH user (default root; non-root uses sudo -n where needed).")]
SshPort = Annotated[Optional[int], typer.Option("--ssh-port", min=1, max=65535, show_default=False,
                                                help="SSH port (default 22).")]


def deploy(
    ctx: typer.Context,
    manifest: Manifest = Path("murmur.yaml"),
    host: Optional[str] = typer.Option(None, "--host", help="SSH target: an existing VM, HOST or USER@HOST:PORT."),
    ssh_user: SshUser = None,
    ssh_port: SshPort = None,
    ssh_key: Optional[Path] = typer.Option(None, "--ssh-key", help="Private key (default: agent, ~/.ssh/id_*)."),
    known_hosts: Optional[Path] = typer.Option(None, "--known-hosts", help="known_hosts file (default ~/.ssh/known_hosts)."),
    trust_new_host: bool = typer.Option(False, "--trust-new-host", help="Record an unknown host key (trust on first use)."),
    docker: bool = typer.Option(False, "--docker", help="Docker target: a container on the local (or DOCKER_HOST) engine."),
    base_image: str = typer.Option("mur-base:bookworm", "--base-image", help="Docker base image (images/build-base.sh)."),
    seccomp_profile: Optional[Path] = typer.Option(None, "--seccomp-profile", help="Docker seccomp profile JSON."),
    image: Optional[str] = typer.Option(None, "--image", help="Docker: deploy this prebuilt capsule image (mur image build; its labels must match the manifest)."),
    image_archive: Optional[Path] = typer.Option(None, "--image-archive", help="Docker: load this `mur image save` archive into the engine, then deploy its image."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Local dir uploaded as the capsule's workdir seed."),
    env: List[str] = typer.Option([], "--env", help="KEY=VALUE for the service (repeatable); satisfies ${KEY} in the manifest."),
    env_file: Optional[Path] = typer.Option(None, "--env-file", help="KEY=VALUE file (default: .env next to the manifest)."),
    release_source: Optional[str] = typer.Option(None, "--release-source", help="DIR or https://BASE with mur-<v>-<platform> + checksums.txt."),
    mur_binary: Optional[Path] = typer.Option(None, "--mur-binary", help="Use this runtime file (its --version must equal the pin)."),
    use_bundle: bool = typer.Option(False, "--use-bundle", help="Local target: run the PyInstaller bundle, not the installed package."),
    publish: bool = typer.Option(False, "--publish", help="Listen on all interfaces (the token is always required)."),
    tls: Optional[str] = typer.Option(None, "--tls", help="'self-signed': HTTPS with a generated certificate (pinned)."),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="HTTPS with this certificate (PEM)."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="The certificate's private key (PEM)."),
    init: str = typer.Option("auto", "--init", help="Supervision: auto | systemd | supervisor."),
    no_boot_hook: bool = typer.Option(False, "--no-boot-hook",
                                      help="Accept a service that does not come back after a reboot (no systemd, no cron)."),
    keep_sessions: int = typer.Option(5, "--keep-sessions", min=1, help="Past session directories kept per deployment."),
    containment: Optional[str] = typer.Option(None, "--containment", help="Raise the containment floor."),
    no_precompile: bool = typer.Option(False, "--no-precompile",
                                       help="Let the target compile the components at first start."),
    keep_lifecycle: bool = typer.Option(False, "--keep-lifecycle",
                                        help="Keep a one-task lifecycle (restart after each task) instead of serving a queue."),
    dep_id: Optional[str] = typer.Option(None, "--id", help="Redeploy this deployment id."),
    start_timeout: Optional[float] = typer.Option(None, "--start-timeout",
                                                  help="Seconds to wait for the agent card (default 180, MUR_DEPLOY_START_TIMEOUT)."),
    lock_wait: LockWait = 0.0,
    check: bool = typer.Option(False, "--check", help="Only run the preflight and print its report."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line on stdout."),
    fleet: Optional[Path] = typer.Option(None, "--fleet", help="Fleet file (default: deploy.yaml beside the manifest)."),
    no_fleet: bool = typer.Option(False, "--no-fleet", help="Ignore deploy.yaml: deploy to the one target given."),
    front: bool = typer.Option(False, "--front", help="SSH/local: a front holds the address, so later releases "
                                                      "switch without refusing a request (chosen at the first deploy)."),
    destination: Optional[str] = typer.Option(None, "--destination", "-d", help="Fleet: merge deploy.DESTINATION.yaml over deploy.yaml."),
    only: List[str] = typer.Option([], "--only", help="Fleet: only these targets or groups (repeatable, or comma-separated)."),
    batch: Optional[str] = typer.Option(None, "--batch", help="Fleet: targets switched at once, N or P% (default: the file's, else 1)."),
    skip_unreachable: bool = typer.Option(False, "--skip-unreachable", help="Fleet: leave out targets that cannot be reached instead of stopping."),
) -> None:
    """Deploy a capsule (default target: this machine; with deploy.yaml: its fleet)."""
    if ctx.invoked_subcommand is not None:
        return
    if init not in INITS:
        raise typer.BadParameter(f"'{init}' is not one of: {', '.join(INITS)}", param_hint="--init")
    if containment is not None and containment not in CLASSES:
        raise typer.BadParameter(f"'{containment}' is not one of: {', '.join(CLASSES)}", param_hint="--containment")
    if host is not None and docker:
        raise typer.BadParameter("choose one target: --host or --docker", param_hint="--docker")
    if front and docker:
        raise typer.BadParameter("--front is for SSH hosts and this machine (a container restarts in place)",
                                 param_hint="--front")
    if tls is not None and (tls_cert or tls_key):
        raise typer.BadParameter("--tls self-signed or --tls-cert/--tls-key, not both", param_hint="--tls")
    from mur.deploy import operations
    from mur.deploy.request import DeployRequest
    from mur.deploy.targets import TargetSpec
    from mur.errors import MurError

    if host is not None and not host.strip():
        raise MurError("E-DEPLOY-001", "no host specified; create a VM first, then pass its IP via --host",
                       "e.g. --host deployer@203.0.113.7 (or mur vm create for a local one)")
    from mur.cli import fleet as fleet_cli

    fleet_path = fleet_cli.fleet_file(manifest, fleet, no_fleet, single=docker or dep_id is not None)
    if fleet_path is not None:  # deploy.yaml: a rolling deploy to its targets (--host/--only narrow it)
        ctx = _context(lock_wait, start_timeout)
        fleet_cli.deploy_fleet(
            fleet_path, manifest, destination=destination, only=only, host=host, env=env, batch=batch,
            skip_unreachable=skip_unreachable, lock_wait=lock_wait, json_out=json_out, check=check, ctx=ctx,
            common=dict(workdir=workdir.resolve() if workdir else None, release_source=release_source,
                        mur_binary=mur_binary, use_bundle=use_bundle, publish=publish, init=init,
                        containment=containment, trust_new_host=trust_new_host, start_timeout=ctx.timeout,
                        base_image=base_image, seccomp_profile=str(seccomp_profile) if seccomp_profile else None,
                        keep_lifecycle=keep_lifecycle, precompile=not no_precompile, keep_sessions=keep_sessions,
                        no_boot_hook=no_boot_hook, tls=tls, tls_cert=tls_cert.resolve() if tls_cert else None,
                        tls_key=tls_key.resolve() if tls_key else None))
        return
    if destination or only or batch or skip_unreachable:
        raise MurError("E-DEPLOY-001", "--destination, --only, --batch and --skip-unreachable need a fleet file",
                       "write deploy.yaml beside murmur.yaml (docs/deploy.md, \"Fleets\"), or pass --fleet FILE")
    if host:
        spec = TargetSpec.ssh(host, ssh_user, ssh_port, key_file=str(ssh_key.expanduser().resolve()) if ssh_key else None,
                              known_hosts=str(known_hosts.expanduser().resolve()) if known_hosts else None)
    else:
        spec = TargetSpec("docker" if docker else "local")
    ctx = _context(lock_wait, start_timeout)
    req = DeployRequest(
        manifest=manifest.resolve(), target=spec, workdir=workdir.resolve() if workdir else None, env_args=tuple(env),
        env_file=env_file, release_source=release_source, mur_binary=mur_binary, use_bundle=use_bundle,
        publish=publish, init=init, containment=containment, trust_new_host=trust_new_host, deployment_id=dep_id,
        start_timeout=ctx.timeout, base_image=base_image,
        seccomp_profile=str(seccomp_profile) if seccomp_profile else None, keep_lifecycle=keep_lifecycle,
        precompile=not no_precompile, keep_sessions=keep_sessions, no_boot_hook=no_boot_hook, tls=tls,
        tls_cert=tls_cert.resolve() if tls_cert else None, tls_key=tls_key.resolve() if tls_key else None,
        image=image, image_archive=image_archive.resolve() if image_archive else None, front=front)
    if check:
        report = _op(operations.check, req, ctx.reporter, ctx)
        emit(report.to_dict(), json_out, lambda _r: report.render())
        raise typer.Exit(0 if report.ok else 1)
    emit(_op(operations.deploy, req, ctx.reporter, ctx), json_out, _human_deploy)


def ls(json_out: JsonOut = False) -> None:
    """List deployments."""
    from mur.cli.fleet import render_ls
    from mur.deploy.operations import list_deployments

    emit(list_deployments(), json_out, render_ls)


def status(dep: DepId, json_out: JsonOut = False, only: Only = []) -> None:
    """Service state, URL, and whether the agent card answers (exit 3 when it is not running).

    ID is a deployment id or prefix, NAME@TARGET, or a capsule or fleet name (all its deployments)."""
    from mur.cli import fleet as fleet_cli
    from mur.fleet import ops

    if only or ops.covers_many(dep):
        return fleet_cli.many(ops.status(dep, only, StepReporter()), json_out, "status", running=True)
    from mur.deploy.operations import status as run

    ctx = _context()
    result = _op(run, dep, ctx.reporter, ctx)
    emit(result, json_out, _human_status)
    if result.get("status") != "running":
        raise typer.Exit(3)


def logs(dep: DepId,
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming."),
         lines: int = typer.Option(200, "--lines", "-n", help="Lines of history."),
         json_out: bool = typer.Option(False, "--json", help="One JSON line (with -f: one per log line)."),
         only: Only = []) -> None:
    """Show the service log (journal, supervisor log, or container log) with a line per task; a fleet's,
    merged, each line labelled with its NAME@TARGET."""
    from mur.cli import fleet as fleet_cli
    from mur.cli.render import note, terminal_safe
    from mur.fleet import ops
    from mur.remote.logs import deployment_logs, follow_logs

    if only or ops.covers_many(dep):
        return fleet_cli.logs(dep, lines, follow, only, json_out)

    def say(text: str) -> None:
        note(f"note: {text}")

    def write(text: str, record: Optional[dict]) -> None:
        if json_out:
            emit_json({"deployment_id": dep, "line": text, **({"task": record} if record else {})})
        else:
            sys.stdout.write(terminal_safe(text + "\n"))
            sys.stdout.flush()

    if follow:
        follow_logs(dep, lines, write, say)
        return
    shown = deployment_logs(dep, lines, say)
    if json_out:
        emit_json({"deployment_id": dep, "lines": [t.text for t in shown],
                   "tasks": [t.record for t in shown if t.record]})
    else:
        for t in shown:
            write(t.text, None)


def start(dep: DepId, lock_wait: LockWait = 0.0, json_out: JsonOut = False) -> None:
    """Start a stopped deployment (what `current` names; a different release serving is restarted)."""
    from mur.deploy.operations import start as run

    ctx = _context(lock_wait)
    emit(_op(run, dep, ctx.reporter, ctx.timeout, ctx), json_out, _human_result)


def stop(dep: DepId, lock_wait: LockWait = 0.0, json_out: JsonOut = False, only: Only = []) -> None:
    """Stop the service and everything it started; files stay (a capsule or fleet name: all its targets)."""
    from mur.cli import fleet as fleet_cli
    from mur.fleet import ops

    if only or ops.covers_many(dep):
        return fleet_cli.many(ops.stop(dep, only, StepReporter(), lock_wait), json_out, "stopped")
    from mur.deploy.operations import stop as run

    ctx = _context(lock_wait)
    emit(_op(run, dep, ctx.reporter, ctx), json_out, _human_result)


def destroy(dep: DepId, force: Force = False, lock_wait: LockWait = 0.0, json_out: JsonOut = False,
            only: Only = []) -> None:
    """Stop, remove everything of the deployment from its target, then forget it (a capsule or fleet
    name: all its targets)."""
    from mur.cli import fleet as fleet_cli
    from mur.fleet import ops

    if only or ops.covers_many(dep):
        return fleet_cli.many(ops.destroy(dep, only, StepReporter(), force=force, lock_wait=lock_wait),
                              json_out, "destroyed")
    from mur.deploy.operations import destroy as run

    ctx = _context(lock_wait)
    emit(_op(run, dep, ctx.reporter, force=force, ctx=ctx), json_out,
         lambda r: f"destroyed {r['deployment_id']} ({r.get('target')})\n")


def rollback(dep: DepId,
             to: Optional[int] = typer.Option(None, "--to", metavar="N",
                                              help="Roll back to this complete release (default: the newest older one)."),
             lock_wait: LockWait = 0.0,
             json_out: JsonOut = False,
             only: Only = []) -> None:
    """Serve an earlier release again (bundle, capsule, config and material together; a capsule or fleet
    name: on all its targets)."""
    from mur.cli import fleet as fleet_cli
    from mur.fleet import ops

    if only or ops.covers_many(dep):
        if to is not None:
            raise typer.BadParameter("--to names a release of one deployment; give its id or NAME@TARGET",
                                     param_hint="--to")
        return fleet_cli.many(ops.rollback(dep, only, StepReporter(), lock_wait), json_out, "rolled back")
    from mur.deploy.operations import rollback as run

    ctx = _context(lock_wait)
    emit(_op(run, dep, ctx.reporter, ctx.timeout, to=to, ctx=ctx), json_out, _human_result)


def gc(deps: List[str] = typer.Argument(None, metavar="[ID...]"),
       host: Optional[str] = typer.Option(None, "--host", help="An SSH target, HOST or USER@HOST:PORT (with or without deployments here)."),
       ssh_user: SshUser = None,
       ssh_port: SshPort = None,
       ssh_key: Optional[Path] = typer.Option(None, "--ssh-key", help="Private key."),
       known_hosts: Optional[Path] = typer.Option(None, "--known-hosts", help="known_hosts file."),
       docker: bool = typer.Option(False, "--docker", help="The Docker engine."),
       local: bool = typer.Option(False, "--local", help="This machine."),
       json_out: JsonOut = False) -> None:
    """Remove what interrupted commands left (staging, partial releases and runtimes, stale payload
    caches, smoke starts) and shared files no deployment uses; locked deployments are skipped."""
    from mur.deploy.operations import gc as run
    from mur.deploy.targets import TargetSpec

    if sum(bool(x) for x in (host, docker, local)) > 1:
        raise typer.BadParameter("choose one target: --host, --docker or --local", param_hint="--host")
    spec = None
    if host:
        spec = TargetSpec.ssh(host, ssh_user, ssh_port, key_file=str(ssh_key.expanduser().resolve()) if ssh_key else None,
                              known_hosts=str(known_hosts.expanduser().resolve()) if known_hosts else None)
    elif docker or local:
        spec = TargetSpec("docker" if docker else "local")
    ctx = _context()
    emit({"targets": _op(run, list(deps or []), spec, ctx.reporter, ctx)}, json_out, _human_gc)


# Upstream v0.2.0's spellings, kept so its scripts work: `mur ps` and `mur destroy ID`.
def ps(json_out: JsonOut = False) -> None:
    """List deployments (same as `mur deploy ls`)."""
    ls(json_out)


def destroy_alias(dep: DepId, force: Force = False, json_out: JsonOut = False) -> None:
    """Stop, remove the remote files, then forget a deployment (same as `mur deploy destroy`)."""
    destroy(dep, force=force, json_out=json_out)


def supervise_run(spec: str = typer.Option(..., "--spec", help="The release's service.json."),
                  log_stdout: bool = typer.Option(False, "--log-stdout", help="Log to stdout (a container).")) -> None:
    """Keep one deployment's `mur run` alive (foreground)."""
    from mur.deploy.supervisor import Supervisor, load_spec

    out = sys.stdout.buffer if log_stdout else None
    raise typer.Exit(Supervisor(load_spec(spec), out).run())


def supervise_smoke(spec: str = typer.Option(..., "--spec"), release_dir: str = typer.Option(..., "--release-dir"),
                    port: int = typer.Option(..., "--port"), timeout: float = typer.Option(120.0, "--timeout")) -> None:
    """Start a release once on a spare port, check it answers, stop it; one JSON line."""
    from mur.deploy.supervisor import load_spec, smoke

    res = smoke(load_spec(spec), release_dir, port, timeout)
    emit_json(res)
    raise typer.Exit(0 if res.get("ok") else 1)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Deploy a capsule as a supervised service (this machine, SSH host, Docker).",
                        invoke_without_command=True, no_args_is_help=False)
    group.callback()(deploy)
    group.command("ls")(ls)
    group.command("status")(status)
    group.command("logs")(logs)
    group.command("start")(start)
    group.command("stop")(stop)
    group.command("destroy")(destroy)
    group.command("rollback")(rollback)
    group.command("gc")(gc)
    app.add_typer(group, name="deploy")
    app.command("ps")(ps)
    app.command("destroy")(destroy_alias)

    supervise = typer.Typer(help="Internal: the on-target half of `mur deploy` (not for direct use).",
                            no_args_is_help=True)
    supervise.command("run")(supervise_run)
    supervise.command("smoke")(supervise_smoke)
    app.add_typer(supervise, name="supervise", hidden=True)
