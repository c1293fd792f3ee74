"""Fixtures for the A2A tests: a real CapsuleService on 127.0.0.1 with a trivial executor."""

from __future__ import annotations

import pytest

from mur.testing.a2a_harness import HarnessFactory


@pytest.fixture
def make_service(tmp_path, monkeypatch):
    """``make_service(executor=echo, initial_task=None, idle_timeout=10, service_kw={}, **lifecycle)``."""
    # The harness keeps serving until the test ends, so the post-lifecycle linger (2 s per ended
    # session, for senders of a real process) only slows these tests down.
    monkeypatch.setenv("MURMUR_A2A_LINGER_SECS", "0")
    factory = HarnessFactory(tmp_path / "session")
    yield factory
    factory.close()
