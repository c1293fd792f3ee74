"""Fixtures shared by every folder of integration/ (each defined once, here)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HELLO_COPY_IGNORE = shutil.ignore_patterns("workdir", "__pycache__", ".murmur")


@pytest.fixture(scope="session")
def componentize_py() -> None:
    """Skips when componentize-py (the dev extra that builds Python guests) is not installed."""
    if shutil.which("componentize-py") is None and not (Path(sys.executable).parent / "componentize-py").is_file():
        pytest.skip("componentize-py is not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="session")
def driver_wasm(componentize_py) -> Path:
    """The murmur-driver-anthropic component (built with mur.wasm.build; cached)."""
    from mur.wasm.build import build_component

    return build_component(ROOT / "examples" / "murmur-driver-anthropic", "driver")


@pytest.fixture(scope="session")
def greet_wasm(componentize_py) -> Path:
    """examples/hello's greet tool component (cached)."""
    from mur.wasm.build import build_component

    return build_component(ROOT / "examples" / "hello" / "greet", "tool")


@pytest.fixture(scope="session")
def built_hello(componentize_py) -> Path:
    """examples/hello with its components built (mur.wasm.build, cached by input hash across runs)."""
    from mur.wasm.build import build_guest_dir

    src = ROOT / "examples" / "hello"
    build_guest_dir(src / "greet")
    build_guest_dir(src)
    return src


@pytest.fixture
def hello(built_hello: Path, tmp_path: Path) -> Path:
    """A private copy of the built hello capsule (its own workdir/, murmur.lock...)."""
    dest = tmp_path / "hello"
    shutil.copytree(built_hello, dest, ignore=HELLO_COPY_IGNORE)
    return dest


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A clean HOME (tmp_path/home) for subprocesses, so the machine's stores and config never leak in."""
    path = tmp_path / "home"
    path.mkdir()
    return path
