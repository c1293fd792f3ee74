"""`mur run --explain-scope`'s output: the report computed (mur.session.prechecks.explain), printed
as text or one JSON line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mur.cli.render import emit_json

if TYPE_CHECKING:
    from mur.session.options import RunOptions


def show(report: dict[str, Any], json_out: bool) -> None:
    if json_out:
        emit_json(report)
        return
    from mur.sandbox.scope_text import render_scope_report

    print(render_scope_report(report), end="")


def explain_and_show(opts: RunOptions) -> None:
    """Compute the report and print it."""
    from mur.session.prechecks import explain

    show(explain(opts), opts.json)
