"""The session's model client for `transport: http`: the staged driver component, called through
the session's WasmHost with the driver's own guest config (grants, env, limits)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from mur.inference.continuation import Continuation
    from mur.inference.driver import DriverModelClient
    from mur.manifest.capsule import Inference
    from mur.session.reporter import SessionReporter
    from mur.session.tools import SessionTools


def driver_client(tools: SessionTools, inference: Inference | None, reporter: SessionReporter | None = None,
                  continuation: Continuation | None = None, context_id: str | None = None) -> DriverModelClient | None:
    """A DriverModelClient over the staged `inference.driver_artifact`, or None when there is none.
    A provider retry's backoff shows through `reporter.activity` (a SessionReporter); `continuation`
    (the session's mur.inference.continuation.Continuation) lets the driver hold the conversation."""
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

    client = DriverModelClient(call_driver, continuation=continuation, context_id=context_id)
    if reporter is not None:
        client.on_retry, client.sleep = _shown_backoff(reporter, client.policy.max_retries)
    return client


def _shown_backoff(reporter: SessionReporter, retries: int) -> tuple[Callable[..., None], Callable[[float], None]]:
    """(on_retry, sleep) for with_retries: each backoff is an activity naming the failure and the retry."""
    said = {"text": "inference provider: retrying"}

    def on_retry(attempt: int, error: Any, wait: float) -> None:
        said["text"] = f"inference provider: {error.describe()}; retry {attempt} of {retries} in {wait:.0f}s"

    def sleep(seconds: float) -> None:
        with reporter.activity(said["text"]):
            time.sleep(seconds)

    return on_retry, sleep
