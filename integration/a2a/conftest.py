"""Fixtures for the A2A tests: a real CapsuleService on 127.0.0.1 with a trivial executor."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mur.testing.a2a_harness import HarnessFactory


@pytest.fixture
def make_service(tmp_path):
    """``make_service(executor=echo, initial_task=None, idle_timeout=10, service_kw={}, **lifecycle)``."""
    factory = HarnessFactory(tmp_path / "session")
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> Path:
    """A private copy of examples/hello with its components built (a plain capsule: "Hello, <task>!")."""
    from mur.wasm.build import build_guest_dir

    src = Path(__file__).resolve().parents[2] / "examples" / "hello"
    build_guest_dir(src / "greet")
    build_guest_dir(src)
    dest = tmp_path_factory.mktemp("a2a") / "hello"
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("workdir", "__pycache__", ".murmur"))
    return dest
