"""Calls the __NAME__ tool with the task through murmur:tool-registry/invoke; writes out/result.txt."""

import json
import os

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import invoke
from wit_world.imports import run as tool


def read_task() -> str:
    for name in ("task.md", "input.txt"):
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
        try:
            result = invoke.invoke("__NAME__", tool.ToolInput(json.dumps({"text": read_task() or "hello"}), None))
        except Err as err:
            write_result(f"error: {err.value}")
            return
        write_result(result.data or f"error: {result.summary}")
