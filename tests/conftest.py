"""Fixtures shared by every folder of tests/ (each defined once, here)."""

from __future__ import annotations

from typing import Any

import pytest

from mur.testing.modelserver import ModelServer


@pytest.fixture
def model_server():
    """`model_server(replies)` -> a started ModelServer (stopped after the test)."""
    started: list[ModelServer] = []

    def start(replies: list[Any]) -> ModelServer:
        server = ModelServer(replies).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
