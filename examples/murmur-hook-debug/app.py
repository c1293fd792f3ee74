"""murmur-hook-debug (`hook` world): one JSON line per lifecycle event in ./hook-debug.jsonl.

Line shape: {"ts": <unix ms>, "hook": <MURMUR_HOOK_NAME>, "event": "<lifecycle function>",
"data": {<the event record, snake_case fields>}}. The file lives in the hook's preopen, which only
exists when the capsule grants `capabilities.filesystem.scope` on this hook's entry. Without one the
first write fails: the hook returns that error once (the runtime logs it to
logs/hook-murmur-hook-debug.log and traces a hook_dispatch_error) and stays quiet afterwards.
"""

import dataclasses
import json
import os
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import lifecycle

FILE = "hook-debug.jsonl"
_state = {"failed": False}


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _record(event_name, event):
    if _state["failed"]:
        return lifecycle.HookOutput_None_()
    line = {"ts": time.time_ns() // 1_000_000, "hook": os.environ.get("MURMUR_HOOK_NAME", "murmur-hook-debug"),
            "event": event_name, "data": _plain(event)}
    try:
        with open(FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, separators=(",", ":")) + "\n")
    except OSError as exc:
        _state["failed"] = True
        raise Err(f"murmur-hook-debug cannot write {FILE} ({exc}); hooks are default-deny: grant it "
                  "`capabilities: {filesystem: {scope: .}}` on its artifact entry")
    return lifecycle.HookOutput_None_()


class Lifecycle(exports.Lifecycle):
    def on_stage(self, event):
        return _record("on-stage", event)

    def on_session_start(self, ctx):
        return _record("on-session-start", ctx)

    def on_task_start(self, event):
        return _record("on-task-start", event)

    def on_inference(self, event):
        return _record("on-inference", event)

    def on_tool_call(self, event):
        return _record("on-tool-call", event)

    def on_shell(self, event):
        return _record("on-shell", event)

    def on_compaction(self, event):
        return _record("on-compaction", event)

    def on_task_end(self, event):
        return _record("on-task-end", event)

    def on_session_end(self, event):
        return _record("on-session-end", event)
