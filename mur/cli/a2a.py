"""``mur send``, ``mur watch`` and ``mur cancel``: talk to a running capsule over A2A."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    from mur.a2a.client import Credentials

URL_HELP = ("Capsule URL, as `mur run` prints it (localhost:<port>; https://... with TLS), a deployment id, "
            "NAME@TARGET, or a capsule or fleet name (an answering deployment of it).")
Token = Annotated[Optional[str], typer.Option("--token", help="Bearer token the capsule wants (else MURMUR_A2A_TOKEN).")]
TokenFile = Annotated[
    Optional[Path], typer.Option("--token-file", help="File holding the bearer token (mode 600).")
]
CaCert = Annotated[
    Optional[Path], typer.Option("--cacert", help="Verify the server's TLS certificate against this PEM CA/certificate.")
]
Pin = Annotated[
    Optional[str],
    typer.Option("--pin-sha256", help="Accept exactly the server certificate with this SHA-256 fingerprint (hex)."),
]


def resolve_credentials(
    target: str, token: str | None, token_file: Path | None, cacert: Path | None, pin: str | None,
    fleet_target: str | None = None,
) -> tuple[str, "Credentials"]:
    """The URL to call and the credentials to call it with. The token: --token, else --token-file,
    else MURMUR_A2A_TOKEN, else the deployment record's token file; the server check: --cacert or
    --pin-sha256, else the record's pin (an https:// URL without either is verified against the
    system's CAs). `target` may be a URL, a deployment id / unique prefix or NAME@TARGET (`mur deploy ls`),
    or a capsule or fleet name: an answering deployment of it (on `fleet_target` when given)."""
    from mur.a2a.auth import read_token_file
    from mur.a2a.client import Credentials, normalize_url, parse_pin

    if token and token_file:
        raise typer.BadParameter("give --token or --token-file, not both", param_hint="--token")
    from mur.deploy.operations import credentials_for
    from mur.fleet.address import pick

    # a capsule or fleet name, else a deployment id/prefix or NAME@TARGET, or a URL a deployment recorded
    recorded = pick(target, fleet_target) or credentials_for(target)
    if recorded is not None:
        target = recorded[0]
        if not (token or token_file or os.environ.get("MURMUR_A2A_TOKEN")) and recorded[1]:
            token_file = Path(recorded[1])
        if cacert is None and pin is None:
            pin = recorded[2]
    if token_file is not None:
        token = read_token_file(token_file)
    token = token or os.environ.get("MURMUR_A2A_TOKEN", "").strip() or None
    if pin is not None:
        try:
            pin = parse_pin(pin)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--pin-sha256") from exc
    credentials = Credentials(token=token, cacert=cacert, pin_sha256=pin)
    return normalize_url(target, tls=credentials.tls), credentials


def register(app: typer.Typer) -> None:
    @app.command("send")
    def send(
        url: str = typer.Argument(..., help=URL_HELP),
        text: str = typer.Argument(..., help="The task text (or the reply to a task waiting for input)."),
        context: str = typer.Option(None, "--context", help="contextId to continue a threaded conversation."),
        json_out: bool = typer.Option(False, "--json", help="Print the final task as one JSON line."),
        timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for the task to finish (0: forever)."),
        token: Token = None,
        token_file: TokenFile = None,
        cacert: CaCert = None,
        pin_sha256: Pin = None,
        fleet_target: Optional[str] = typer.Option(None, "--target", help="With a capsule or fleet name: send to its deployment on this target."),
    ) -> None:
        """Send a task to a capsule and print its result."""
        from mur.a2a.client import send_task, task_text
        from mur.cli.render import emit_json, note, terminal_safe
        from mur.errors import MurError

        base, credentials = resolve_credentials(url, token, token_file, cacert, pin_sha256, fleet_target)
        task = send_task(base, text, context_id=context, timeout=timeout or None, credentials=credentials)
        state = task.get("status", {}).get("state")
        if json_out:
            emit_json(task)
            if state in ("failed", "rejected"):
                raise typer.Exit(1)
            return
        if state == "completed":
            answer = task_text(task)
            sys.stdout.write(terminal_safe(answer if answer.endswith("\n") or not answer else answer + "\n"))
            sys.stdout.flush()
            return
        if state == "input-required":
            sys.stdout.write(f"input required: {task_text(task)}\n")
            sys.stdout.flush()
            note(f'  reply with: mur send {url} "<answer>"   (task {task.get("id")})')
            return
        raise MurError("E-A2A-001", f"task {task.get('id')} {state}: {task_text(task) or 'no message'}")

    @app.command("cancel")
    def cancel(
        url: str = typer.Argument(..., help=URL_HELP),
        task_id: str = typer.Argument(..., metavar="TASK_ID", help="The task id (tsk_...) message/send returned."),
        json_out: bool = typer.Option(False, "--json", help="Print the task as one JSON line."),
        token: Token = None,
        token_file: TokenFile = None,
        cacert: CaCert = None,
        pin_sha256: Pin = None,
    ) -> None:
        """Cancel a task: queued, waiting for input, or (agent capsules) running, at its next step."""
        from mur.a2a.client import A2AClient
        from mur.cli.render import emit_json

        url, credentials = resolve_credentials(url, token, token_file, cacert, pin_sha256)
        with A2AClient(url, credentials=credentials) as client:
            task = client.cancel_task(task_id)
        state = task.get("status", {}).get("state")
        if json_out:
            emit_json(task)
        elif state == "working":  # accepted for a running task: it stops at its next step boundary
            print(f"{task.get('id')} canceling (it stops before its next step)")
        else:
            print(f"{task.get('id')} {state}")

    @app.command("watch")
    def watch(
        url: str = typer.Argument(..., help=URL_HELP),
        task: str = typer.Option(None, "--task", help="Only this task's events; exit when it ends."),
        token: Token = None,
        token_file: TokenFile = None,
        cacert: CaCert = None,
        pin_sha256: Pin = None,
    ) -> None:
        """Follow a capsule's event stream (stream/watch) until it closes."""
        from mur.a2a.client import A2AClient
        from mur.a2a.render import WatchRenderer

        url, credentials = resolve_credentials(url, token, token_file, cacert, pin_sha256)
        renderer = WatchRenderer()
        with A2AClient(url, credentials=credentials) as client:
            for event in client.watch(task_id=task):
                shown = renderer.render(event.event, event.data)
                if shown.stdout:
                    sys.stdout.write(shown.stdout)
                    sys.stdout.flush()
                for line in shown.stderr:
                    print(line, file=sys.stderr, flush=True)
