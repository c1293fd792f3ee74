"""The __NAME__ capsule component (`capsule` world): reads the task, writes out/result.txt."""

import os

from wit_world import exports

TASK_FILES = ("task.md", "input.txt")


def read_task() -> str:
    for name in TASK_FILES:
        try:
            with open(name, encoding="utf-8") as fh:
                return fh.read().strip()
        except FileNotFoundError:
            continue
    return ""


class Run(exports.Run):
    def run(self) -> None:
        task = read_task() or "nothing"
        os.makedirs("out", exist_ok=True)
        with open("out/result.txt", "w", encoding="utf-8") as fh:
            fh.write(f"__NAME__ was asked: {task}\n")
