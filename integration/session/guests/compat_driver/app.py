"""Test driver (driver world) reproducing upstream's streaming and continuation driver fixtures.

Its behaviour comes from `inference.driver.config.mode` (MURMUR_INFERENCE_DRIVER_CONFIG); it never
makes an HTTP call:

  stream        emits three text chunks ("chunk_one ", "chunk_two ", "chunk_three") and ends the
                turn with their concatenation (upstream's streaming-driver);
  continuation  turn 0 (one user message, no continuation_id) asks for `bash` with
                {"command": "echo hello"} and returns metadata continuation_id=cont-echo-1; any later
                turn ends with "wire_n=<messages it received> cont=<continuation_id or none>"
                (upstream's continuation-driver);
  nocont        the same without ever returning a continuation id.

Built once per test session by integration/session (never shipped).
"""

import json
import os

from wit_world import exports
from wit_world.exports import run as types
from wit_world.imports import chunks


def _reply(body: dict, metadata=None) -> types.ToolResult:
    return types.ToolResult(types.Status.PASSED, "compat driver", json.dumps(body), None, False, metadata or [])


def _mode() -> str:
    try:
        return str(json.loads(os.environ.get("MURMUR_INFERENCE_DRIVER_CONFIG") or "{}").get("mode", ""))
    except ValueError:
        return ""


class Run(exports.Run):
    def run(self, input: types.ToolInput) -> types.ToolResult:
        payload = json.loads(input.data or "{}")
        mode = _mode()
        if mode == "stream":
            for text in ("chunk_one ", "chunk_two ", "chunk_three"):
                chunks.emit_chunk(text)
            return _reply({"stop_reason": "end_turn",
                           "content": [{"type": "text", "text": "chunk_one chunk_two chunk_three"}]})
        messages = payload.get("messages") or []
        held = payload.get("continuation_id")
        if held is None and len(messages) <= 1:
            call = {"type": "tool_call", "id": "toolu_echo", "name": "bash", "input": {"command": "echo hello"}}
            meta = [] if mode == "nocont" else [("continuation_id", "cont-echo-1")]
            return _reply({"stop_reason": "tool_call", "content": [call]}, meta)
        report = f"wire_n={len(messages)} cont={held or 'none'}"
        return _reply({"stop_reason": "end_turn", "content": [{"type": "text", "text": report}]})
