"""`mur deploy`: run a capsule as a supervised service on this machine, an SSH host or Docker.

    mur deploy [--host H | --docker] [OPTIONS]     deploy or redeploy (default target: this machine)
    mur deploy --check [--json]                    preflight only
    mur deploy ls | status ID | logs ID [-f] | start ID | stop ID | destroy ID | rollback ID

`mur supervise` (hidden) is the on-target half: the supervisor, smoke starts, agent-card checks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from mur.cli.render import emit

INITS = ("auto", "systemd", "supervisor")
CLASSES = ("advisory", "scoped", "sealed")


def _progress(json_out: bool):
    from mur.deploy.progress import Progress

    return Progress(enabled=True)


def _human_deploy(r: dict) -> str:
    lines = [f"∞ {r.get('name')} {r.get('version')}", f"  url      {r.get('url')}"]
    if r.get("tunnel"):
        lines.append(f"  reach    {r['tunnel']}   (then use the url above)")
    lines.append(f"  dep      {r.get('deployment_id')}")
    if r.get("container"):
        lines.append(f"  container {r['container']} ({r.get('image')})")
    rel = r.get("release")
    if r.get("unchanged"):
        lines.append(f"  release  {rel if rel is not None else ''} unchanged: nothing uploaded".replace("  unchanged", " unchanged"))
    elif rel is not None:
        lines.append(f"  release  {rel} ({r.get('uploaded', 0)} files uploaded)")
    lines.append(f"  service  {r.get('init')} · mur {r.get('mur_version')}")
    lines.append(f"  time     {r.get('elapsed')}s")
    return "\n".join(lines) + "\n"


def _human_kv(r: dict) -> str:
    out = []
    for k, v in r.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a}={b}" for a, b in v.items() if not isinstance(b, (dict, list)))
        out.append(f"{k:<14} {v}")
    return "\n".join(out) + "\n"


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Deploy a capsule as a supervised service (this machine, SSH host, Docker).",
                        invoke_without_command=True, no_args_is_help=False)

    @group.callback()
    def deploy(
        ctx: typer.Context,
        manifest: Path = typer.Option(Path("murmur.yaml"), "--manifest", "-m", help="Capsule manifest."),
        host: Optional[str] = typer.Option(None, "--host", help="SSH target: an existing VM (IP or hostname)."),
        ssh_user: str = typer.Option("root", "--ssh-user", help="SSH user (non-root uses sudo -n where needed)."),
        ssh_port: int = typer.Option(22, "--ssh-port", help="SSH port."),
        ssh_key: Optional[Path] = typer.Option(None, "--ssh-key", help="Private key (default: agent, ~/.ssh/id_*)."),
        known_hosts: Optional[Path] = typer.Option(None, "--known-hosts", help="known_hosts file (default ~/.ssh/known_hosts)."),
        trust_new_host: bool = typer.Option(False, "--trust-new-host", help="Record an unknown host key (trust on first use)."),
        docker: bool = typer.Option(False, "--docker", help="Docker target: a container on the local (or DOCKER_HOST) engine."),
        base_image: str = typer.Option("mur-base:bookworm", "--base-image", help="Docker base image (images/build-base.sh)."),
        seccomp_profile: Optional[Path] = typer.Option(None, "--seccomp-profile", help="Docker seccomp profile JSON."),
        workdir: Optional[Path] = typer.Option(None, "--workdir", help="Local dir uploaded as the capsule's workdir seed."),
        env: List[str] = typer.Option([], "--env", help="KEY=VALUE for the service (repeatable)."),
        env_file: Optional[Path] = typer.Option(None, "--env-file", help="KEY=VALUE file (default: .env next to the manifest)."),
        release_source: Optional[str] = typer.Option(None, "--release-source", help="DIR or https://BASE with mur-<v>-<platform> + checksums.txt."),
        mur_binary: Optional[Path] = typer.Option(None, "--mur-binary", help="Use this runtime file (its --version must equal the pin)."),
        use_bundle: bool = typer.Option(False, "--use-bundle", help="Local target: run the PyInstaller bundle, not the installed package."),
        publish: bool = typer.Option(False, "--publish", help="Listen on all interfaces instead of 127.0.0.1."),
        init: str = typer.Option("auto", "--init", help="Supervision: auto | systemd | supervisor."),
        containment: Optional[str] = typer.Option(None, "--containment", help="Raise the containment floor."),
        no_precompile: bool = typer.Option(False, "--no-precompile",
                                           help="Let the target compile the components at first start."),
        keep_lifecycle: bool = typer.Option(False, "--keep-lifecycle",
                                            help="Keep a one-task lifecycle (restart after each task) instead of serving a queue."),
        dep_id: Optional[str] = typer.Option(None, "--id", help="Redeploy this deployment id."),
        start_timeout: float = typer.Option(180.0, "--start-timeout", help="Seconds to wait for the agent card."),
        check: bool = typer.Option(False, "--check", help="Only run the preflight and print its report."),
        json_out: bool = typer.Option(False, "--json", help="One JSON line on stdout."),
    ) -> None:
        """Deploy a capsule (default target: this machine)."""
        if ctx.invoked_subcommand is not None:
            return
        if init not in INITS:
            raise typer.BadParameter(f"'{init}' is not one of: {', '.join(INITS)}", param_hint="--init")
        if containment is not None and containment not in CLASSES:
            raise typer.BadParameter(f"'{containment}' is not one of: {', '.join(CLASSES)}", param_hint="--containment")
        if host is not None and docker:
            raise typer.BadParameter("choose one target: --host or --docker", param_hint="--docker")
        from mur.deploy.connect import TargetSpec
        from mur.deploy.service import DeployRequest
        from mur.errors import MurError

        if host is not None and not host.strip():
            raise MurError("E-DEPLOY-001", "no host specified; create a VM first, then pass its IP via --host")
        if host:
            spec = TargetSpec("ssh", host=host, port=ssh_port, user=ssh_user,
                              key_file=str(ssh_key.expanduser().resolve()) if ssh_key else None,
                              known_hosts=str(known_hosts.expanduser().resolve()) if known_hosts else None)
        elif docker:
            spec = TargetSpec("docker")
        else:
            spec = TargetSpec("local")
        req = DeployRequest(
            manifest=manifest.resolve(), target=spec, workdir=workdir.resolve() if workdir else None, env_args=list(env),
            env_file=env_file, release_source=release_source, mur_binary=mur_binary, use_bundle=use_bundle,
            publish=publish, init=init, containment=containment, trust_new_host=trust_new_host, deployment_id=dep_id,
            start_timeout=start_timeout, base_image=base_image,
            seccomp_profile=str(seccomp_profile) if seccomp_profile else None, keep_lifecycle=keep_lifecycle,
            precompile=not no_precompile)
        progress = _progress(json_out)
        if check:
            from mur.deploy.service import check as run_check

            report = run_check(req, progress)
            emit(report.to_dict(), json_out, lambda _r: report.render())
            raise typer.Exit(0 if report.ok else 1)
        from mur.deploy.service import deploy as run_deploy

        result = run_deploy(req, progress)
        emit(result, json_out, _human_deploy)

    @group.command("ls")
    def ls(json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """List deployments."""
        from mur.deploy.lifecycle import list_deployments, render_table

        records = list_deployments()
        emit(records, json_out, render_table)

    @group.command("status")
    def status(dep: str = typer.Argument(..., metavar="ID"),
               json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """Service state, URL, and whether the agent card answers."""
        from mur.deploy.lifecycle import status as run

        result = run(dep, _progress(json_out))
        emit(result, json_out, _human_kv)
        if result.get("status") != "running":
            raise typer.Exit(3)

    @group.command("logs")
    def logs(dep: str = typer.Argument(..., metavar="ID"),
             follow: bool = typer.Option(False, "--follow", "-f", help="Keep streaming."),
             lines: int = typer.Option(200, "--lines", "-n", help="Lines of history.")) -> None:
        """Show the service log (journal, supervisor log, or container log)."""
        from mur.deploy.lifecycle import logs as run

        def sink(data: bytes) -> None:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()

        text = run(dep, lines, follow, sink)
        if text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")

    @group.command("start")
    def start(dep: str = typer.Argument(..., metavar="ID"),
              json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """Start a stopped deployment."""
        from mur.deploy.lifecycle import start as run

        emit(run(dep, _progress(json_out)), json_out, _human_kv)

    @group.command("stop")
    def stop(dep: str = typer.Argument(..., metavar="ID"),
             json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """Stop the service and everything it started; files stay."""
        from mur.deploy.lifecycle import stop as run

        emit(run(dep, _progress(json_out)), json_out, _human_kv)

    @group.command("destroy")
    def destroy(dep: str = typer.Argument(..., metavar="ID"),
                force: bool = typer.Option(False, "--force", help="Forget it even if the remote cleanup fails."),
                json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """Stop, remove the remote files, then forget the deployment."""
        from mur.deploy.lifecycle import destroy as run

        result = run(dep, _progress(json_out), force=force)
        emit(result, json_out, lambda r: f"destroyed {r['deployment_id']} ({r.get('host') or 'docker'})\n")

    @group.command("rollback")
    def rollback(dep: str = typer.Argument(..., metavar="ID"),
                 json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """Serve the previous release again (bundle, capsule and config together)."""
        from mur.deploy.lifecycle import rollback as run

        emit(run(dep, _progress(json_out)), json_out, _human_kv)

    app.add_typer(group, name="deploy")

    # Upstream v0.2.0's spellings, kept so its scripts work: `mur ps` and `mur destroy ID`.
    @app.command("ps")
    def ps(json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """List deployments (same as `mur deploy ls`)."""
        ls(json_out)

    @app.command("destroy")
    def destroy_alias(dep: str = typer.Argument(..., metavar="ID"),
                      force: bool = typer.Option(False, "--force", help="Forget it even if the remote cleanup fails."),
                      json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """Stop, remove the remote files, then forget a deployment (same as `mur deploy destroy`)."""
        destroy(dep, force, json_out)

    @app.command("supervise", hidden=True)
    def supervise(
        spec: Optional[str] = typer.Option(None, "--spec"),
        foreground: bool = typer.Option(False, "--foreground"),
        log_stdout: bool = typer.Option(False, "--log-stdout"),
        stop_: bool = typer.Option(False, "--stop"),
        status_: bool = typer.Option(False, "--status"),
        run_dir: Optional[str] = typer.Option(None, "--run-dir"),
        smoke: bool = typer.Option(False, "--smoke"),
        release_dir: Optional[str] = typer.Option(None, "--release-dir"),
        port: int = typer.Option(0, "--port"),
        timeout: float = typer.Option(120.0, "--timeout"),
        agent_card: Optional[str] = typer.Option(None, "--agent-card"),
        wait: float = typer.Option(30.0, "--wait"),
    ) -> None:
        """Internal: the on-target supervisor used by `mur deploy` (not for direct use)."""
        from mur.cli.render import emit_json
        from mur.deploy import supervisor as sv
        from mur.errors import MurError

        if agent_card:
            res = sv.agent_card(agent_card, wait=wait)
            emit_json(res)
            raise typer.Exit(0 if res.get("ok") else 1)
        if stop_ or status_:
            if not run_dir:
                raise typer.BadParameter("needs --run-dir", param_hint="--run-dir")
            emit_json(sv.stop(run_dir) if stop_ else sv.read_state(run_dir))
            return
        if not spec:
            raise typer.BadParameter("needs --spec", param_hint="--spec")
        data = sv.load_spec(spec)
        if smoke:
            if not release_dir or not port:
                raise MurError("E-DEPLOY-001", "--smoke needs --release-dir and --port")
            res = sv.smoke(data, release_dir, port, timeout)
            emit_json(res)
            raise typer.Exit(0 if res.get("ok") else 1)
        if foreground:
            if log_stdout:
                data["log_to_stdout"] = True
            raise typer.Exit(sv.Supervisor(data).run())
        emit_json(sv.start_detached(spec))
