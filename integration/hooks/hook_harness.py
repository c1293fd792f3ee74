"""Runs a capsule session in-process through mur.session.runner.Session's stages (check, bind, stage,
start tools, serve, tear down), with what `mur run` cannot inject: a model client for the hooks'
run-inference and build_hooks' tuning knobs (queue depth, drain budget, HTTP transport), given to
Session.start_tools. The real `mur run` path is tested in test_hooks_mur_run.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.trace.reader import load_events


@dataclass
class SessionResult:
    session: Path
    accessible: Path
    status: str
    error: MurError | None
    hooks: Any
    trace: list[dict] = field(default_factory=list)

    def events(self, kind: str) -> list[dict]:
        return [e for e in self.trace if e["event_type"] == kind]

    def hook_log(self, name: str) -> str:
        path = self.session / "logs" / f"hook-{name}.log"
        return path.read_text() if path.is_file() else ""

    def probe_lines(self, name: str) -> list[dict]:
        import json

        out = []
        for line in self.hook_log(name).splitlines():
            if line.startswith('{"probe"'):
                out.append(json.loads(line))
        return out


def run_session(manifest: Path, task: str | None, *, workdir: Path | None = None, model_client: Any = None,
                hook_kwargs: dict | None = None) -> SessionResult:
    from mur.session.options import RunOptions
    from mur.session.reporter import SilentReporter
    from mur.session.runner import Session

    opts = RunOptions(manifest=Path(manifest), task=task, workdir=workdir, no_env_file=True)
    session = Session.check(opts, SilentReporter())
    before = os.environ.get("MURMUR_A2A_TIMEOUT_SECS")
    os.environ["MURMUR_A2A_TIMEOUT_SECS"] = "1"  # a single-task capsule given no task waits 1 s, not 30
    try:
        with session:
            session.bind()
            session.stage()
            session.start_tools(model_client=model_client, **(hook_kwargs or {}))
            session.serve()
    finally:
        if before is None:
            os.environ.pop("MURMUR_A2A_TIMEOUT_SECS", None)
        else:
            os.environ["MURMUR_A2A_TIMEOUT_SECS"] = before
    ending = session.ending()
    wd = session.wd
    events = load_events(wd.trace) if wd.trace.is_file() else []
    return SessionResult(wd.session, wd.accessible, ending.status, ending.error, session.hooks, events)
