"""The hello capsule component (`capsule` world).

Reads the task (first of task.md, input.txt in its working directory), asks the `greet` tool for
a greeting through murmur:tool-registry/invoke, and writes the answer to out/result.txt. On a
failed tool call it writes `error: <reason>` instead, as upstream's result.txt convention says.
"""

import json
import os

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import invoke
from wit_world.imports import run as tool

TASK_FILES = ("task.md", "input.txt")


def read_task() -> str:
    for name in TASK_FILES:
        try:
            with open(name, encoding="utf-8") as fh:
                return fh.read().strip()
        except FileNotFoundError:
            continue
    return ""


def write_result(text: str) -> None:
    os.makedirs("out", exist_ok=True)
    with open("out/result.txt", "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


class Run(exports.Run):
    def run(self) -> None:
        name = read_task() or "world"
        try:
            result = invoke.invoke("greet", tool.ToolInput(json.dumps({"name": name}), None))
        except Err as err:
            write_result(f"error: {err.value}")
            return
        if result.status != tool.Status.PASSED:
            write_result(f"error: {result.summary or 'greet did not pass'}")
            return
        write_result(result.data or "")
