"""Fixtures for the OTel export tests: the synthetic two-task session of tests/support/trace_events.py."""

from __future__ import annotations

import pytest

from trace_events import session_events


@pytest.fixture
def events() -> list[dict]:
    return session_events()
