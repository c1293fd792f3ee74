"""A tool registry for driving a capsule component in tests and benchmarks: tool name -> handler,
the `invoke` that `WasmHost.run_capsule` hands `murmur:tool-registry/invoke` (a session's own is
mur.session.tools.SessionTools.invoke).

A handler takes a ToolInput and returns a ToolResult (a WASM tool's handler is usually
``lambda data: host.call_tool(cfg, data)``). An unknown name, or a handler that raises, becomes an
``err`` string for the calling guest; ``on_call`` sees every call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from mur.errors import MurError
from mur.wasm.types import ToolInput, ToolResult

Handler = Callable[[ToolInput], ToolResult]


@dataclass
class ToolCall:
    """One dispatched call, as reported to ``on_call``."""

    name: str
    input: ToolInput
    result: ToolResult | None
    error: MurError | None
    duration_ms: int


class ToolRegistry:
    """Name -> handler, with one dispatch entry point for capsules and the agent loop alike."""

    def __init__(self, on_call: Callable[[ToolCall], None] | None = None):
        self._handlers: dict[str, Handler] = {}
        self.on_call = on_call

    def register(self, name: str, handler: Handler) -> None:
        """Add (or replace) a tool."""
        self._handlers[name] = handler

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, name: str) -> bool:
        return name in self._handlers

    def invoke(self, name: str, data: ToolInput) -> ToolResult:
        """Dispatch one call; MurError for an unknown tool or a failed call."""
        started = time.monotonic()
        handler = self._handlers.get(name)
        result: ToolResult | None = None
        error: MurError | None = None
        try:
            if handler is None:
                known = ", ".join(self.names()) or "none"
                raise MurError("E-RUN-008", f"unknown tool '{name}' (declared tools: {known})")
            result = handler(data)
            return result
        except MurError as exc:
            error = exc
            raise
        finally:
            if self.on_call is not None:
                self.on_call(ToolCall(name, data, result, error,
                                      int((time.monotonic() - started) * 1000)))
