"""Helpers shared by the hook integration tests (a uniquely named module: tests must not `import conftest`)."""

from __future__ import annotations

from pathlib import Path


def hook_entry(name: str, path: Path, caps: dict | None = None) -> dict:
    entry = {"name": name, "runtime": "hook", "source": str(path), "local_source": True}
    if caps is not None:
        entry["capabilities"] = caps
    return entry
