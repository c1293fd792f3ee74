"""`mur eval show|diff|run`: a session's eval.jsonl (murmur-hook-eval) summarized, or two compared, or a
capsule run over a dataset of cases and each case scored.

SESSION is a session address as for `mur trace show` (full id, a suffix of it, `@N`, or a path
to an eval.jsonl or a session directory); default: the most recent session. Exit 0 even when nothing
was scored. `mur eval diff [A B]` compares two sessions' pass rates per scorer (default @2 @1).
E-EVAL-001: a line of the file is not an eval record; E-EVAL-002: no eval file (or no session) for the
address. `mur eval run [CAPSULE_DIR] --dataset FILE.jsonl` runs the capsule once per dataset line
(mur.eval.run); failing cases are results (exit 0), only errors that stop the run exit 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

Workdir = Annotated[Path, typer.Option("--workdir", help="Directory holding the ses_* session directories.")]

app = typer.Typer(help="Read the eval.jsonl a session's murmur-hook-eval wrote, or run a dataset.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="eval")


@app.command("show")
def show(
    session: Optional[str] = typer.Argument(
        None, help="Session address: full id, id suffix, @N (N-th most recent), or a path. Default @1."
    ),
    workdir: Workdir = Path("workdir"),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON line: overall, scorers, dataset_run."),
) -> None:
    """Summarize one session's eval scores: pass rates per scorer, overall result, failing events."""
    from mur.cli.render import emit
    from mur.eval.file import render
    from mur.eval.file import show as show_eval

    summary, scores, path = show_eval(session, workdir)
    emit(summary, json_out, lambda _: render(summary, scores, path))


@app.command("diff")
def diff(
    a: Optional[str] = typer.Argument(
        None, help="Run A: session address as for show, or a path. Default @2 (with B omitted too)."
    ),
    b: Optional[str] = typer.Argument(None, help="Run B: session address as for show, or a path. Default @1."),
    workdir: Workdir = Path("workdir"),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON line: per-scorer rates, deltas, overall."),
) -> None:
    """Compare two sessions' eval scores: pass rate per scorer in each run, delta in points, overall."""
    from mur.cli.render import emit
    from mur.eval.diff import render, show as show_diff

    result = show_diff(a, b, workdir)
    emit(result, json_out, render)


@app.command("run")
def run(
    capsule: Path = typer.Argument(
        Path("."), metavar="CAPSULE_DIR", help="Capsule directory holding murmur.yaml (default: .)."
    ),
    dataset: Optional[Path] = typer.Option(
        None, "--dataset", help='JSONL file, one case a line: {"case_id", "task_path", "expected"?}. '
                                "Default: ./eval.jsonl."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print one JSON line: dataset, dataset_id, cases, pass, total."
    ),
    workdir_root: Optional[Path] = typer.Option(
        None, "--workdir-root",
        help="Directory for the per-case workdirs (default: <capsule dir>/workdir/eval-<timestamp>).",
    ),
) -> None:
    """Run the capsule once per dataset case and score each session with murmur-hook-eval."""
    from mur.cli.render import emit, note
    from mur.eval.run import render_case_result, render_case_start, render_start, render_summary, run_eval

    def out(text: str) -> None:  # the per-case lines: progress on stderr when stdout carries JSON
        if json_out:
            note(text)
        else:
            typer.echo(text)

    def on_result(result) -> None:
        if result.error:
            note(f"    stage failed: {result.error}")
        out(render_case_result(result))

    if dataset is None:  # upstream's default and words
        dataset = Path("eval.jsonl")
        if not dataset.is_file():
            from mur.errors import MurError

            beside = capsule / "eval.jsonl"
            hint = (f"the capsule's folder has one: pass --dataset {beside}" if beside.is_file()
                    else 'write eval.jsonl here (a case a line: {"case_id", "task_path", "expected"?}) or pass '
                         "--dataset PATH")
            raise MurError("E-IO-001", "no dataset found. Expected ./eval.jsonl or specify with --dataset <path>", hint)
    result = run_eval(capsule, dataset, workdir_root, on_start=lambda count: out(render_start(count)),
                      on_case=lambda case: out(render_case_start(case)),
                      on_result=on_result, note=note)
    emit(result.as_json(), json_out, lambda _: render_summary(result))
