"""Fixtures for `mur run` end-to-end tests: a built copy of examples/hello in a temp dir."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def built_hello() -> Path:
    """examples/hello with its components built (componentize-py, cached across runs)."""
    from mur.wasm.build import build_guest_dir

    src = ROOT / "examples" / "hello"
    build_guest_dir(src / "greet")
    build_guest_dir(src)
    return src


@pytest.fixture
def hello(built_hello: Path, tmp_path: Path) -> Path:
    """A private copy of the built hello capsule (its own workdir/, murmur.lock...)."""
    dest = tmp_path / "hello"
    shutil.copytree(built_hello, dest, ignore=shutil.ignore_patterns("workdir", "__pycache__", ".murmur"))
    return dest


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A clean HOME so stores and config files of the machine never leak into a test."""
    path = tmp_path / "home"
    path.mkdir()
    return path
