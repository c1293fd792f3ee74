"""`mur trace show [SESSION] [--workdir DIR] [--json]`: a session's trace.jsonl as a readable timeline.

SESSION is a session address (full id, 4+ character suffix, `@N` = N-th most recent, or a path to a
trace.jsonl or a session directory); default `@1`. E-TRC-001: the trace does not parse; E-TRC-002:
the address matched no session or several.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    trace_app = typer.Typer(help="Read the trace.jsonl a session wrote.", no_args_is_help=True)

    @trace_app.command("show")
    def show(
        session: Optional[str] = typer.Argument(
            None, help="Session address: full id, 4+ char suffix, @N (N-th most recent), or a path. Default @1."
        ),
        workdir: Path = typer.Option(
            Path("workdir"), "--workdir", help="Directory holding the ses_* session directories."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON line (summary + timeline)."),
    ) -> None:
        """Summarize one session's trace and list its events as a timeline."""
        from mur.cli.render import emit_json
        from mur.observability.timeline import render, show as show_session

        summary = show_session(session, workdir)
        if json_out:
            emit_json(summary)
            return
        typer.echo(render(summary), nl=False)

    app.add_typer(trace_app, name="trace")
