"""Test guest (capsule world): reads a JSON task from task.md and does what its `op` says.

ops: "invoke" (call each {"tool", "data"} in `calls`, write the outcomes to out/result.txt as JSON),
"loop" (spin forever), "panic" (raise), "read" (try to read `path`, report to out/result.txt).
"""

import json
import os

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import invoke
from wit_world.imports import run as tool


def _write(obj) -> None:
    os.makedirs("out", exist_ok=True)
    with open("out/result.txt", "w") as fh:
        fh.write(json.dumps(obj))


class Run(exports.Run):
    def run(self) -> None:
        with open("task.md") as fh:
            req = json.loads(fh.read())
        op = req.get("op")
        if op == "invoke":
            outcomes = []
            for call in req.get("calls", []):
                try:
                    res = invoke.invoke(call["tool"], tool.ToolInput(call.get("data"), None))
                    outcomes.append({"status": res.status.name.lower(), "data": res.data,
                                     "summary": res.summary})
                except Err as err:
                    outcomes.append({"err": err.value})
            _write(outcomes)
        elif op == "direct-run":
            res = tool.run(tool.ToolInput(None, None))
            _write({"status": res.status.name.lower(), "summary": res.summary})
        elif op == "loop":
            while True:
                pass
        elif op == "panic":
            raise ValueError("capsule probe panicked on purpose")
        elif op == "read":
            try:
                with open(req["path"]) as fh:
                    _write({"ok": True, "text": fh.read(100)})
            except Exception as exc:
                _write({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
