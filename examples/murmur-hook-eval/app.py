"""murmur-hook-eval (`hook` world): scores the session and writes ./eval.jsonl at on-session-end.

State kept in memory for the whole session (the runtime keeps one instance per session): the
parsed scorers (read at on-session-start from MURMUR_EVAL_CONFIG) and every tool name on-tool-call
reported. Each on-session-end rewrites eval.jsonl from that state, so after a task that ran several
attempts (reopened) the file reflects the last, cumulative session_end.

Without MURMUR_EVAL_CONFIG (no observability.eval.scorers in the capsule) the hook prints a warning
— the runtime appends guest output to logs/hook-murmur-hook-eval.log — and does nothing else.
eval.jsonl needs a filesystem grant on the hook's entry; without one on-session-end returns an error
saying so (logged and traced as hook_dispatch_error; the session itself is unaffected).
"""

import os
import sys
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import lifecycle

import scoring

FILE = "eval.jsonl"
_state = {"ready": False, "scorers": [], "error": None, "tools": []}


def _none():
    return lifecycle.HookOutput_None_()


def _warn(message):
    print(f"[murmur-hook-eval] {message}", file=sys.stderr, flush=True)


def _start():
    if _state["ready"]:
        return
    _state["ready"] = True
    config = os.environ.get("MURMUR_EVAL_CONFIG", "")
    if not config.strip():
        _warn("MURMUR_EVAL_CONFIG is not set - no eval scores will be written for this session")
        _state["disabled"] = True
        return
    try:
        _state["scorers"] = scoring.parse_scorers(config)
    except scoring.ConfigError as exc:
        _state["error"] = exc
        _warn(f"MURMUR_EVAL_CONFIG is invalid at '{exc.key}': {exc.message} - eval.jsonl will record "
              "overall=config_error")
        return
    for scorer in _state["scorers"]:
        if scorer["type"] == "llm_judge":
            _warn(f"scorer '{scorer['name']}' type 'llm_judge' is not yet implemented - scoring nothing")


def _empty(value):
    return value if value else None


def _write(end):
    ts = time.time_ns() // 1_000_000
    if _state["error"] is not None:
        records, scores, overall = [], {}, "config_error"
    else:
        records, scores, overall = scoring.score_session(_state["scorers"], _state["tools"], end, ts)
    lines = scoring.eval_lines(records, scores, overall, _empty(os.environ.get("MURMUR_DATASET_ID")),
                               _empty(os.environ.get("MURMUR_CASE_ID")), ts, _state["error"])
    try:
        with open(FILE + ".tmp", "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        os.replace(FILE + ".tmp", FILE)
    except OSError as exc:
        raise Err(f"[murmur-hook-eval] failed to write {FILE} ({exc}); hooks are default-deny: grant it "
                  "`capabilities: {filesystem: {scope: .}}` on its artifact entry")


class Lifecycle(exports.Lifecycle):
    def on_stage(self, event):
        return _none()

    def on_session_start(self, ctx):
        _start()
        return _none()

    def on_task_start(self, event):
        return _none()

    def on_inference(self, event):
        return _none()

    def on_tool_call(self, event):
        _state["tools"].append(event.tool_name)
        return _none()

    def on_shell(self, event):
        return _none()

    def on_compaction(self, event):
        return _none()

    def on_task_end(self, event):
        return _none()

    def on_session_end(self, event):
        _start()
        if _state.get("disabled"):
            return _none()
        _write({"total_turns": event.total_turns, "total_input_tokens": event.total_input_tokens,
                "total_output_tokens": event.total_output_tokens, "exit_status": event.exit_status})
        return _none()
