"""`mur run`: validate, probe, stage a session and run the capsule (or just explain its scope).

The options as typer declares them (`mur run --help`, usage errors, completion); a well-formed
invocation is parsed without typer by mur.cli.runfast (start-up), which tests keep in step with this."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from mur.cli.options import Manifest
from mur.cli.runexec import RESULT_INLINE_LIMIT, TerminalReporter, ending_json  # noqa: F401 - re-exported

CLASSES = ("advisory", "scoped", "sealed")


def _choice(value: Optional[str], allowed: tuple[str, ...], flag: str) -> Optional[str]:
    """A flag limited to `allowed`: anything else is upstream's E-IO-003 (exit 1, not a usage error)."""
    if value is not None and value not in allowed:
        from mur.errors import MurError

        raise MurError("E-IO-003", f"{flag} must be one of: {', '.join(allowed)}; got '{value}'", "`mur run --help` says what each means")
    return value


def run(
    ctx: typer.Context,
    capsule: Optional[Path] = typer.Argument(
        None, metavar="CAPSULE", show_default=False,
        help="The capsule: a directory holding murmur.yaml, or the file (the same as -m)."),
    manifest: Manifest = Path("murmur.yaml"),
    task: Optional[str] = typer.Option(None, "--task", "-t", help="Task: a file path (copied) or literal text."),
    system_prompt: Optional[str] = typer.Option(None, "--system-prompt", help="Override the system prompt."),
    lifecycle_task_acceptance: Optional[str] = typer.Option(
        None, "--lifecycle-task-acceptance", help="Override lifecycle.task_acceptance (none|single|queue)."
    ),
    lifecycle_after_task: Optional[str] = typer.Option(
        None, "--lifecycle-after-task", help="Override lifecycle.after_task (exit|sleep)."
    ),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Accessible workdir (default: <manifest dir>/workdir/<session>)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output: the startup line first, one line at the end."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print workdir, manifest, driver and skills."),
    bind: str = typer.Option("127.0.0.1", "--bind", help="Address the A2A server binds."),
    port: Optional[int] = typer.Option(None, "--port", help="Port for the A2A server (default: network.internal_port or OS-assigned)."),
    no_env_file: bool = typer.Option(False, "--no-env-file", help="Do not load .env next to the manifest."),
    containment: Optional[str] = typer.Option(None, "--containment", help="Raise the containment floor (advisory|scoped|sealed)."),
    explain_scope: bool = typer.Option(False, "--explain-scope", help="Print the containment report and grants, then exit."),
    a2a_token_file: Optional[Path] = typer.Option(
        None, "--a2a-token-file", envvar="MURMUR_A2A_TOKEN_FILE", help="A2A callers need this bearer token (file mode 600)."
    ),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", envvar="MURMUR_A2A_TLS_CERT", help="Serve A2A over HTTPS: PEM certificate."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", envvar="MURMUR_A2A_TLS_KEY", help="PEM private key for --tls-cert."),
) -> None:
    """Run a capsule: validate, probe the kernel, stage a session workdir, execute, trace."""
    if capsule is not None:  # `mur run DIR`, as `mur build DIR`
        given = getattr(ctx.get_parameter_source("manifest"), "name", "DEFAULT")  # typer may carry its own click
        if given != "DEFAULT":
            raise typer.BadParameter(f"give the capsule once: as an argument ({capsule}) or with -m ({manifest})",
                                     param_hint="CAPSULE")
        from mur.paths import manifest_path

        manifest = manifest_path(capsule)
    _choice(containment, CLASSES, "--containment")
    _choice(lifecycle_task_acceptance, ("none", "single", "queue"), "--lifecycle-task-acceptance")
    _choice(lifecycle_after_task, ("exit", "sleep"), "--lifecycle-after-task")
    if port is not None and not 0 < port < 65536:
        raise typer.BadParameter("must be between 1 and 65535", param_hint="--port")
    if (tls_cert is None) != (tls_key is None):
        raise typer.BadParameter("--tls-cert and --tls-key go together", param_hint="--tls-cert" if tls_key else "--tls-key")
    from mur.cli.runexec import execute
    from mur.session.options import RunOptions

    execute(RunOptions(
        manifest=manifest,
        task=task,
        system_prompt=system_prompt,
        task_acceptance=lifecycle_task_acceptance,
        after_task=lifecycle_after_task,
        workdir=workdir,
        json=json_out,
        verbose=verbose,
        bind=bind,
        port=port,
        no_env_file=no_env_file,
        containment=containment,
        explain_scope=explain_scope,
        a2a_token_file=a2a_token_file,
        tls_cert=tls_cert,
        tls_key=tls_key,
    ))


def register(app: typer.Typer) -> None:
    app.command("run")(run)
