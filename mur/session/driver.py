"""The session's model client for `transport: http`: the staged driver component, called through
the session's WasmHost with the driver's own guest config (grants, env, limits)."""

from __future__ import annotations

from typing import Any


def driver_client(tools: Any, inference: Any) -> Any:
    """A DriverModelClient over the staged `inference.driver_artifact`, or None when there is none."""
    if inference is None or inference.transport != "http" or not inference.driver_artifact:
        return None
    driver = tools.staged.tools.get(inference.driver_artifact)
    if driver is None or driver.wasm_path is None:
        return None
    from mur.inference.driver import DriverModelClient
    from mur.wasm.types import ToolInput

    cfg = tools.guest_config(driver)

    def call_driver(payload: str) -> Any:
        return tools.host.call_tool(cfg, ToolInput(data=payload), kind="driver")

    return DriverModelClient(call_driver)
