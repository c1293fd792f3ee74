"""The __NAME__ tool component (`tool` world): {"text": "hi"} -> "HI"."""

import json

from wit_world import exports
from wit_world.exports import run as tool


def _result(status, summary, data=None):
    return tool.ToolResult(status, summary, data, None, False, [("state_effect", "read")])


class Run(exports.Run):
    def run(self, input: tool.ToolInput) -> tool.ToolResult:
        try:
            args = json.loads(input.data or "{}")
        except ValueError as exc:
            return _result(tool.Status.ERROR, f"input is not JSON: {exc}")
        text = str(args.get("text") or "")
        if not text:
            return _result(tool.Status.FAILED, "missing 'text'")
        return _result(tool.Status.PASSED, "echoed", text.upper())
