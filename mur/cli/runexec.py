"""What `mur run` does once its options are parsed (by typer in mur.cli.run, or by mur.cli.runfast
without it): print the scope report, or run the session and report it on the terminal."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any, ContextManager

from mur.cli.render import Reported, emit_json, note

if TYPE_CHECKING:
    from mur.session.options import RunOptions
    from mur.session.reporter import Ending, Startup

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


def execute(opts: RunOptions) -> None:
    """`mur run` with these options: the scope report (--explain-scope), or the session."""
    if opts.explain_scope:
        from mur.cli.explain import explain_and_show

        explain_and_show(opts)
        return
    from mur.session.runner import run_session

    reporter = TerminalReporter(opts.json, opts.verbose)
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
