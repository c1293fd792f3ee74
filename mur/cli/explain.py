"""`mur run --explain-scope`'s output: computed (and remembered), or read back by mur.cli.main
before the CLI framework loads (mur.session.explain_memo says when a report may be reused)."""

from __future__ import annotations

import contextlib
import io
import sys
from typing import TYPE_CHECKING, Any, Iterator

from mur.cli.render import emit_json

if TYPE_CHECKING:
    from mur.session.explain_memo import Invocation
    from mur.session.options import RunOptions


def show(report: dict[str, Any], json_out: bool) -> None:
    if json_out:
        emit_json(report)
        return
    from mur.sandbox.scope_text import render_scope_report

    print(render_scope_report(report), end="")


def replay_remembered(args: list[str], launch: dict[str, Any]) -> bool:
    """Print the report remembered for this invocation (`mur run ... --explain-scope`); False when
    there is none, and then `launch["explain_memo"]` is what the computed one is remembered under."""
    from mur.session import explain_memo

    if not explain_memo.enabled():
        return False
    invocation = explain_memo.Invocation.of(args)  # now: before `.env` loading changes the environment
    found = invocation.replay() if invocation is not None else None
    if found is None:
        launch["explain_memo"] = invocation
        return False
    if found.stderr:
        sys.stderr.write(found.stderr)
        sys.stderr.flush()
    show(found.report, found.json)
    return True


def explain_and_show(opts: RunOptions, invocation: Invocation | None) -> None:
    """Compute the report and print it; remember it for `invocation` (None: do not)."""
    from mur.errors import MurError
    from mur.session.prechecks import explain_inputs, explain_probed

    recorder = None
    if invocation is not None:
        try:
            recorder = invocation.recorder(explain_inputs(opts))
        except MurError:  # no home or no working directory: explain says so itself
            pass
    with _tee_stderr() as seen:
        report, probe = explain_probed(opts)
    show(report, opts.json)
    if recorder is not None:
        recorder.record(seen.getvalue(), report, opts.json, probe)


class _Tee:
    """sys.stderr, also copied into a buffer: the warnings an explanation prints are part of it."""

    def __init__(self, stream: Any, copy: io.StringIO):
        self.stream, self.copy = stream, copy

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self.stream, name)


@contextlib.contextmanager
def _tee_stderr() -> Iterator[io.StringIO]:
    copy, previous = io.StringIO(), sys.stderr
    sys.stderr = _Tee(previous, copy)
    try:
        yield copy
    finally:
        sys.stderr = previous
