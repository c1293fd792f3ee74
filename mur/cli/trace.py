"""`mur trace show|steps|diff|report`: read the trace.jsonl files sessions wrote (docs/observability.md).

SESSION is a session address (full id, a suffix of it, `@N` = N-th most recent, or a path to a
trace.jsonl or a session directory); default `@1`. `show` and `steps` take `--deployment ID` to read
a deployed session where it runs (mur.remote.traces: SFTP for an SSH host, read-only). E-TRC-001: the
trace does not parse; E-TRC-002:
the address matched no session or several.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

_ADDRESS = "Session address: full id, id suffix, @N (N-th most recent), or a path."

Session = Annotated[Optional[str], typer.Argument(help=f"{_ADDRESS} Default @1.")]
Workdir = Annotated[
    Optional[Path], typer.Option("--workdir", help="Directory holding the ses_* session directories (default ./workdir).")
]
Manifest = Annotated[
    Optional[Path], typer.Option("--manifest", "-m", help="Read the sessions of this capsule (its <dir>/workdir).")
]
Deployment = Annotated[
    Optional[str],
    typer.Option("--deployment", "-d", metavar="ID",
                 help="Read a deployed session's trace where it runs (SSH: read-only over SFTP)."),
]

app = typer.Typer(help="Read the trace.jsonl a session wrote.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="trace")


def _only_deployment(deployment: Optional[str], workdir: Optional[Path], manifest: Optional[Path]) -> None:
    if deployment is not None and (workdir is not None or manifest is not None):
        raise typer.BadParameter("give --deployment, or --workdir / --manifest, not both", param_hint="--deployment")


def _deployed(deployment: str, session: Optional[str]) -> tuple[list, str]:
    """(events, where the trace is) of a deployed session (mur.remote.traces)."""
    from mur.cli.render import note
    from mur.remote.traces import deployment_trace

    return deployment_trace(deployment, session, note=lambda text: note(f"note: {text}"))


def _sessions_dir(workdir: Optional[Path], manifest: Optional[Path]) -> Path:
    """--workdir as given, else the workdir `mur run -m MANIFEST` writes to, else ./workdir."""
    if workdir is not None:
        if manifest is not None:
            raise typer.BadParameter("give --workdir or --manifest, not both", param_hint="--manifest")
        return workdir
    if manifest is None:
        return Path("workdir")
    from mur.errors import MurError
    from mur.paths import manifest_path

    path = manifest_path(manifest)
    if not path.is_file():
        raise MurError("E-IO-001", f"manifest not found: {path}", "pass the murmur.yaml given to `mur run -m`")
    return path.parent / "workdir"


def _since(value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    from mur.trace.report import parse_duration

    try:
        parse_duration(value)
    except ValueError as exc:  # upstream's words and code (scripts match them)
        from mur.errors import MurError

        raise MurError("E-TRC-002", f"unrecognised --since format '{value}' — expected <N>m, <N>h, or <N>d",
                       hint="also <N>s; e.g. 30m, 2h, 1d") from exc
    return value


@app.command("show")
def show(
    session: Session = None,
    workdir: Workdir = None,
    manifest: Manifest = None,
    deployment: Deployment = None,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON line (summary + timeline)."),
) -> None:
    """Summarize one session's trace and list its events as a timeline."""
    from mur.cli.render import emit
    from mur.trace.show import render
    from mur.trace.summary import show as show_session, summarize

    _only_deployment(deployment, workdir, manifest)
    if deployment is not None:
        events, source = _deployed(deployment, session)
        summary = {**summarize(events, source), "trace": source}
    else:
        summary = show_session(session, _sessions_dir(workdir, manifest))
    emit(summary, json_out, render)


@app.command("steps")
def steps(
    session: Session = None,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Add tool inputs, traced outputs and shell commands."),
    workdir: Workdir = None,
    manifest: Manifest = None,
    deployment: Deployment = None,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON line (tasks, attempts, turns, calls)."),
) -> None:
    """Show one session turn by turn: each turn's decision and tokens, and the calls it made."""
    from mur.cli.render import emit
    from mur.trace.steps import build_steps, render, show as show_steps

    _only_deployment(deployment, workdir, manifest)
    if deployment is not None:
        events, source = _deployed(deployment, session)
        result = {**build_steps(events, source, verbose), "trace": source}
    else:
        result = show_steps(session, _sessions_dir(workdir, manifest), verbose)
    emit(result, json_out, render)


@app.command("diff")
def diff(
    before: Optional[str] = typer.Argument(None, help=f"Run A. {_ADDRESS} Default @2 (with AFTER omitted too)."),
    after: Optional[str] = typer.Argument(None, help=f"Run B. {_ADDRESS} Default @1."),
    workdir: Workdir = None,
    manifest: Manifest = None,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON line (metrics, tool calls compared)."),
) -> None:
    """Compare two sessions: turns, tokens, calls, latency, status, and the tool-call sequence."""
    from mur.cli.render import emit
    from mur.trace.diff import render, show as show_diff

    result = show_diff(before, after, _sessions_dir(workdir, manifest))
    emit(result, json_out, render)


@app.command("report")
def report(
    sessions: Optional[List[str]] = typer.Argument(None, help=f"Sessions to include. {_ADDRESS} Default: all."),
    last: Optional[int] = typer.Option(None, "--last", help="Only the N most recently created sessions."),
    since: Optional[str] = typer.Option(None, "--since", callback=_since,
                                        help="Only sessions created within this long: 30m, 2h, 1d."),
    workdir: Workdir = None,
    manifest: Manifest = None,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON line (sessions, totals, tools)."),
) -> None:
    """Aggregate several sessions: status breakdown, totals and averages, most used tools."""
    from mur.cli.render import emit, note
    from mur.trace.report import report as build_report
    from mur.trace.report_view import render

    if sessions and (last is not None or since is not None):
        from mur.errors import MurError

        flag = "--since" if since is not None else "--last"
        raise MurError("E-TRC-002", f"{flag} cannot be combined with explicit session arguments",
                       "give either sessions or the filter")
    result = build_report(list(sessions or []), _sessions_dir(workdir, manifest), last=last, since=since)
    if result["skipped"]:
        note(f"note: skipped {len(result['skipped'])} incomplete session(s)")
    for skipped in result["skipped"]:
        note(f"  {skipped['session']}: [{skipped['code']}] {skipped['message']}")
    emit(result, json_out, render)
