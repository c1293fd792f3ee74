"""Fixtures for the inference tests: an httpx ModelClient on the loopback model server (tests/conftest.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from mur.inference.provider import RetryPolicy
from mur.testing.anthropic import AnthropicClient

if TYPE_CHECKING:
    from mur.testing.modelserver import ModelServer


class Sleeps(list):
    """A sleep() that records what it was asked to wait (and waits a tenth of it, capped)."""

    def __call__(self, seconds: float) -> None:
        import time

        self.append(seconds)
        time.sleep(min(seconds / 10, 0.05))


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def make_client(sleeps):
    clients: list[AnthropicClient] = []

    def make(server: ModelServer, *, timeout: float = 10.0, retries: int = 3) -> AnthropicClient:
        client = AnthropicClient(server.url, "sk-test-key", timeout=timeout,
                                 policy=RetryPolicy(max_retries=retries, base_delay=0.5, max_delay=4.0),
                                 sleep=sleeps)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


class CalcToolBox:
    """A small in-test ToolBox: `add` sums numbers, `fail` always errors; writes tool_call events."""

    def __init__(self, trace: list[dict]):
        self.trace = trace
        self.calls: list[tuple[str, dict, int]] = []

    def specs(self) -> list[dict]:
        return [
            {"name": "add", "description": "Add numbers: {\"numbers\": [1, 2]}",
             "input_schema": {"type": "object", "properties": {"numbers": {"type": "array"}},
                              "required": ["numbers"]}},
            {"name": "fail", "description": "Always fails.", "input_schema": {"type": "object", "properties": {}}},
        ]

    def call(self, name: str, input: dict, turn: int) -> tuple[str, bool]:
        self.calls.append((name, input, turn))
        if name == "add":
            content, is_error = str(sum(input.get("numbers", []))), False
        else:
            content, is_error = f"tool '{name}' failed", True
        self.trace.append({"event_type": "tool_call", "turn": turn, "tool_name": name,
                           "input_bytes": len(json.dumps(input)), "output_bytes": len(content),
                           "status": "error" if is_error else "ok"})
        return content, is_error


@pytest.fixture
def events() -> list[dict]:
    return []


@pytest.fixture
def toolbox(events) -> CalcToolBox:
    return CalcToolBox(events)
