"""`mur run`: validate, probe, stage a session and run the capsule (or just explain its scope)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, Optional

import typer

from mur.cli.render import Reported, emit_json, note

if TYPE_CHECKING:
    from mur.session.reporter import Ending, Startup

CLASSES = ("advisory", "scoped", "sealed")


def _choice(value: Optional[str], allowed: tuple[str, ...], flag: str) -> Optional[str]:
    """A flag limited to `allowed`: anything else is upstream's E-IO-003 (exit 1, not a usage error)."""
    if value is not None and value not in allowed:
        from mur.errors import MurError

        raise MurError("E-IO-003", f"{flag} must be one of: {', '.join(allowed)}; got '{value}'")
    return value


RESULT_INLINE_LIMIT = 64 * 1024  # --json's last line carries the answer up to this size, else only its path


class TerminalReporter:
    """`mur run`'s output. Human: the startup lines, notes and the status on stderr, the answer alone
    on stdout (so `mur run -t ... > answer.txt` keeps just the answer). --json: the startup line first
    and one line at the end on stdout, nothing else there."""

    def __init__(self, json_out: bool, verbose: bool):
        self.json_out = json_out
        self.verbose = verbose
        self.told_interrupt = False  # the ending already said `interrupted` on stderr

    def started(self, s: Startup) -> None:
        if self.json_out:
            emit_json({"url": s.url, "pid": s.pid, "session_id": s.session_id, "name": s.name,
                       "version": s.version, "workdir": str(s.workdir)})
            return
        lines = [f"murmur: url {s.url}", f"session: {s.session_id}"]
        if self.verbose:
            lines += [f"workdir: {s.workdir}", f"tools' workdir: {s.tools_workdir}",
                      f"manifest: {s.name} v{s.version}", f"driver: {s.driver or '<none>'}", f"skills: {s.skills} installed"]
        note("\n".join(lines))

    def waiting(self, url: str, timeout: float | None) -> None:
        if self.json_out:
            return
        how_long = "with no time limit" if timeout is None else f"up to {timeout:g}s"
        note(f"waiting {how_long} for an A2A task: mur send {url} \"<task>\""
             f"  (MURMUR_A2A_TIMEOUT_SECS sets the wait)")

    def activity(self, text: str) -> ContextManager[None]:
        if self.json_out:
            return contextlib.nullcontext()
        from mur.cli.progress import activity

        return activity(text)

    def ended(self, e: Ending) -> None:
        if self.json_out:
            emit_json(ending_json(e))
            return
        note(f"status:  {e.status}")
        self.told_interrupt = e.status == "interrupted"
        if e.status == "ok" and e.result:
            sys.stdout.write(e.result if e.result.endswith("\n") else e.result + "\n")
            sys.stdout.flush()


def ending_json(e: Ending) -> dict[str, Any]:
    """--json's last line: status, session, the answer (inline up to RESULT_INLINE_LIMIT) and its
    file, and the error's code and message when the session failed."""
    inline = e.result is not None and len(e.result.encode("utf-8", "replace")) <= RESULT_INLINE_LIMIT
    out: dict[str, Any] = {"status": e.status, "session_id": e.session_id,
                           "result": e.result if inline else None,
                           "result_path": str(e.result_path) if e.result_path is not None else None}
    if e.error is not None:
        out["error"] = {"code": getattr(e.error, "code", "E-INTERNAL"), "message": getattr(e.error, "message", str(e.error))}
    return out


def run(
    ctx: typer.Context,
    manifest: Path = typer.Option(Path("murmur.yaml"), "--manifest", "-m", help="Capsule manifest: a file, or a directory holding murmur.yaml."),
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
    _choice(containment, CLASSES, "--containment")
    _choice(lifecycle_task_acceptance, ("none", "single", "queue"), "--lifecycle-task-acceptance")
    _choice(lifecycle_after_task, ("exit", "sleep"), "--lifecycle-after-task")
    if port is not None and not 0 < port < 65536:
        raise typer.BadParameter("must be between 1 and 65535", param_hint="--port")
    if (tls_cert is None) != (tls_key is None):
        raise typer.BadParameter("--tls-cert and --tls-key go together", param_hint="--tls-cert" if tls_key else "--tls-key")
    from mur.session.options import RunOptions

    opts = RunOptions(
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
    )
    if explain_scope:
        from mur.cli.explain import explain_and_show

        # mur.cli.main passes the invocation it looked up (a CliRunner or a direct call passes none)
        explain_and_show(opts, ctx.obj.get("explain_memo") if isinstance(ctx.obj, dict) else None)
        return
    from mur.session.runner import run_session

    reporter = TerminalReporter(json_out, verbose)
    try:
        run_session(opts, reporter)
    except KeyboardInterrupt:  # Ctrl-C: one line on stderr (the status line, or this), exit 130
        if not reporter.told_interrupt:
            note("interrupted")
        from mur.wasm.engine import compiling

        if compiling():  # wasmtime cannot stop a compile, and Python's exit waits a second or two on it;
            sys.stdout.flush()  # the session is torn down and flushed, so leave at once
            os._exit(130)
        raise Reported(130) from None


def register(app: typer.Typer) -> None:
    app.command("run")(run)
