"""Python mirrors of the `murmur:tool/run@0.1.0` records, and their wasmtime component values.

wasmtime-py represents a WIT record as a bare ``wasmtime.component.Record`` whose attributes carry
the WIT field names verbatim (kebab-case, e.g. ``log-path``), an enum as its case name, and an
``option<T>`` as ``None`` or the value. These helpers are the one place that knows that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUSES = ("passed", "failed", "error")


@dataclass
class ToolInput:
    """`tool-input`: the call's JSON arguments and an optional log path."""

    data: str | None = None
    log_path: str | None = None


@dataclass
class ToolResult:
    """`tool-result`: what a tool or driver returns."""

    status: str  # "passed" | "failed" | "error"
    summary: str | None = None
    data: str | None = None
    data_path: str | None = None
    truncated: bool = False
    metadata: list[tuple[str, str]] = field(default_factory=list)

    def meta(self, key: str) -> str | None:
        """The first metadata value under `key` (WIT: first tuple wins), or None."""
        return next((v for k, v in self.metadata if k == key), None)

    def to_json(self) -> dict[str, Any]:
        """The JSON shape MURMUR.md documents for a tool result."""
        return {
            "status": self.status,
            "summary": self.summary,
            "data": self.data,
            "data_path": self.data_path,
            "truncated": self.truncated,
            "metadata": [list(kv) for kv in self.metadata],
        }


def _record(**fields: Any) -> Any:
    from wasmtime.component import Record

    rec = Record()
    for name, value in fields.items():
        setattr(rec, name.replace("_", "-"), value)
    return rec


def input_to_value(value: ToolInput) -> Any:
    """A ToolInput as the component value a `run` export takes."""
    return _record(data=value.data, log_path=value.log_path)


def input_from_value(rec: Any) -> ToolInput:
    """The tool-input a guest passed to an import (e.g. tool-registry/invoke)."""
    return ToolInput(data=getattr(rec, "data", None), log_path=getattr(rec, "log-path", None))


def result_to_value(value: ToolResult) -> Any:
    """A ToolResult as the component value an import returns to a guest."""
    if value.status not in STATUSES:
        raise ValueError(f"tool result status must be one of {', '.join(STATUSES)}, got {value.status!r}")
    return _record(
        status=value.status,
        summary=value.summary,
        data=value.data,
        data_path=value.data_path,
        truncated=bool(value.truncated),
        metadata=[(str(k), str(v)) for k, v in value.metadata],
    )


def result_from_value(rec: Any) -> ToolResult:
    """The tool-result a guest's `run` export returned."""
    return ToolResult(
        status=str(getattr(rec, "status")),
        summary=getattr(rec, "summary", None),
        data=getattr(rec, "data", None),
        data_path=getattr(rec, "data-path", None),
        truncated=bool(getattr(rec, "truncated", False)),
        metadata=[(k, v) for k, v in getattr(rec, "metadata", [])],
    )
