"""``mur send``, ``mur watch`` and ``mur cancel``: talk to a running capsule over A2A."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterator, NamedTuple, Optional

import typer

if TYPE_CHECKING:
    from mur.a2a.client import Credentials
    from mur.deploy.state import Deployment
    from mur.remote.reach import Named

URL_HELP = ("Capsule URL, as `mur run` prints it (localhost:<port>; https://... with TLS), a deployment id, "
            "NAME@TARGET, or a capsule or fleet name (an answering deployment of it); an SSH deployment is "
            "reached through its own SSH forward, closed when the command ends.")
Url = Annotated[str, typer.Argument(help=URL_HELP)]
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
    """The URL to call and the credentials to call it with (see `_resolve`)."""
    named, credentials = _resolve(target, token, token_file, cacert, pin, fleet_target)
    return named.url, credentials


def _resolve(
    target: str, token: str | None, token_file: Path | None, cacert: Path | None, pin: str | None,
    fleet_target: str | None = None,
) -> tuple["Named", "Credentials"]:
    """What `target` names and the credentials to call it with. The token: --token, else --token-file,
    else MURMUR_A2A_TOKEN, else the deployment record's token file; the server check: --cacert or
    --pin-sha256, else the record's pin (an https:// URL without either is verified against the
    system's CAs). `target` may be a URL, a deployment id / unique prefix or NAME@TARGET (`mur deploy ls`),
    or a capsule or fleet name: an answering deployment of it (on `fleet_target` when given)."""
    from dataclasses import replace

    from mur.a2a.auth import read_token_file
    from mur.a2a.client import Credentials, normalize_url, parse_pin
    from mur.fleet.address import pick
    from mur.remote.reach import Named, lookup

    if token and token_file:
        raise typer.BadParameter("give --token or --token-file, not both", param_hint="--token")
    # a capsule or fleet name, else a deployment id/prefix or NAME@TARGET, or a URL a deployment recorded
    chosen = pick(target, fleet_target)
    named = Named(chosen.url, chosen) if chosen is not None else lookup(target)
    dep = named.deployment
    if dep is not None:
        if not (token or token_file or os.environ.get("MURMUR_A2A_TOKEN")) and dep.token_file:
            token_file = Path(dep.token_file)
        if cacert is None and pin is None:
            pin = dep.tls_pin
    if token_file is not None:
        token = read_token_file(token_file)
    token = token or os.environ.get("MURMUR_A2A_TOKEN", "").strip() or None
    if pin is not None:
        try:
            pin = parse_pin(pin)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--pin-sha256") from exc
    credentials = Credentials(token=token, cacert=cacert, pin_sha256=pin)
    return replace(named, url=normalize_url(named.url, tls=credentials.tls)), credentials


class Reached(NamedTuple):
    url: str
    credentials: "Credentials"
    shown: Optional[str]
    deployment: "Deployment | None"


@contextlib.contextmanager
def _reached(target: str, token: str | None, token_file: Path | None, cacert: Path | None,
             pin: str | None, fleet_target: str | None = None) -> Iterator[Reached]:
    """The URL to call, its credentials, the name messages use and the deployment behind it, for the
    block: an SSH deployment is reached through a forward this command opens over the verified SSH
    connection and closes when the block ends (mur.remote.reach). Messages name a deployment as the
    user did (not by a forward's local port), so their hints can point at `mur deploy status NAME`."""
    from mur.cli.render import note
    from mur.remote.reach import endpoint

    named, credentials = _resolve(target, token, token_file, cacert, pin, fleet_target)
    with endpoint(named, note=lambda text: note(f"note: {text}")) as url:
        named_as_given = url != named.url or named.deployment is not None
        yield Reached(url, credentials, target if named_as_given else None, named.deployment)


def send(
    url: Url,
    text: str = typer.Argument(..., help="The task text (or the reply to a task waiting for input)."),
    context: str = typer.Option(None, "--context", help="contextId to continue a threaded conversation."),
    json_out: bool = typer.Option(False, "--json", help="Print the final task as one JSON line."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for the task to finish (0: forever)."),
    token: Token = None,
    token_file: TokenFile = None,
    cacert: CaCert = None,
    pin_sha256: Pin = None,
    fleet_target: Optional[str] = typer.Option(
        None, "--target", help="With a capsule or fleet name: send to its deployment on this target."),
) -> None:
    """Send a task to a capsule and print its result."""
    from mur.a2a.client import send_task, task_text
    from mur.cli.render import emit_json, note, terminal_safe
    from mur.errors import MurError

    with _reached(url, token, token_file, cacert, pin_sha256, fleet_target) as reached:
        task = send_task(reached.url, text, context_id=context, timeout=timeout or None,
                         credentials=reached.credentials, shown_as=reached.shown)
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
    dep = reached.deployment
    raise MurError("E-A2A-001", f"task {task.get('id')} {state}: {task_text(task) or 'no message'}",
                   f"its session's trace says why: mur trace show --deployment {dep.deployment_id[:12]}" if dep
                   else "its session's trace says why: `mur trace show` with the capsule's workdir")


def cancel(
    url: Url,
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

    with _reached(url, token, token_file, cacert, pin_sha256) as reached, \
            A2AClient(reached.url, credentials=reached.credentials, shown_as=reached.shown) as client:
        task = client.cancel_task(task_id)
    state = task.get("status", {}).get("state")
    if json_out:
        emit_json(task)
    elif state == "working":  # accepted for a running task: it stops at its next step boundary
        print(f"{task.get('id')} canceling (it stops before its next step)")
    else:
        print(f"{task.get('id')} {state}")


def watch(
    url: Url,
    task: str = typer.Option(None, "--task", help="Only this task's events; exit when it ends."),
    token: Token = None,
    token_file: TokenFile = None,
    cacert: CaCert = None,
    pin_sha256: Pin = None,
) -> None:
    """Follow a capsule's event stream (stream/watch) until it closes."""
    from mur.a2a.client import A2AClient
    from mur.a2a.render import WatchRenderer

    renderer = WatchRenderer()
    with _reached(url, token, token_file, cacert, pin_sha256) as reached, \
            A2AClient(reached.url, credentials=reached.credentials, shown_as=reached.shown) as client:
        for event in client.watch(task_id=task):
            drawn = renderer.render(event.event, event.data)
            if drawn.stdout:
                sys.stdout.write(drawn.stdout)
                sys.stdout.flush()
            for line in drawn.stderr:
                print(line, file=sys.stderr, flush=True)


def register(app: typer.Typer) -> None:
    app.command("send")(send)
    app.command("cancel")(cancel)
    app.command("watch")(watch)
