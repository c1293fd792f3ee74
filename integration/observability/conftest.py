"""Fixtures: a real OTLP/HTTP receiver process on 127.0.0.1, and a closed loopback port."""

from __future__ import annotations

import socket

import pytest
from otel_support import ReceiverProcess


@pytest.fixture
def receiver():
    """`receiver(*extra_args)` -> a started ReceiverProcess (stopped after the test)."""
    started: list[ReceiverProcess] = []

    def start(*args: str) -> ReceiverProcess:
        rx = ReceiverProcess(*args)
        started.append(rx)
        return rx

    yield start
    for rx in started:
        rx.stop()


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port
