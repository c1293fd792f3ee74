"""`mur eval show [SESSION] [--workdir DIR] [--json]`: a session's eval.jsonl (murmur-hook-eval) summarized.

SESSION is a session address as for `mur trace show` (full id, 4+ character suffix, `@N`, or a path
to an eval.jsonl or a session directory); default: the most recent session. Exit 0 even when nothing
was scored. E-EVAL-001: a line of the file is not an eval record; E-EVAL-002: no eval file (or no
session) for the address.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    eval_app = typer.Typer(help="Read the eval.jsonl a session's murmur-hook-eval wrote.", no_args_is_help=True)

    @eval_app.command("show")
    def show(
        session: Optional[str] = typer.Argument(
            None, help="Session address: full id, 4+ char suffix, @N (N-th most recent), or a path. Default @1."
        ),
        workdir: Path = typer.Option(
            Path("workdir"), "--workdir", help="Directory holding the ses_* session directories."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON line: overall, scorers, dataset_run."),
    ) -> None:
        """Summarize one session's eval scores: pass rates per scorer, overall result, failing events."""
        from mur.cli.render import emit_json
        from mur.observability.evalfile import render
        from mur.observability.evalfile import show as show_eval

        summary, scores, path = show_eval(session, workdir)
        if json_out:
            emit_json(summary)
            return
        typer.echo(render(summary, scores, path), nl=False)

    app.add_typer(eval_app, name="eval")
