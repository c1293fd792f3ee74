"""The `greet` tool component (`tool` world): {"name": "Ada"} -> "Hello, Ada!".

The greeting word comes from HELLO_GREETING when the capsule's capabilities.env.allow lets it
through, which makes this example show what a guest can and cannot see of the host environment.
"""

import json
import os

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
        name = str(args.get("name") or "").strip()
        if not name:
            return _result(tool.Status.FAILED, "missing 'name'")
        greeting = os.environ.get("HELLO_GREETING", "Hello")
        return _result(tool.Status.PASSED, f"greeted {name}", f"{greeting}, {name}!")
