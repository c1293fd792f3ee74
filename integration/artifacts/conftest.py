"""Fixtures for the artifact integration tests (helpers live in artifacts_registry_helpers.py)."""

from __future__ import annotations

from typing import Iterator

import pytest

from artifacts_registry_helpers import Registry, registry_server  # type: ignore[import-not-found]


@pytest.fixture
def registry(tmp_path) -> Iterator[Registry]:
    with registry_server(tmp_path / "reg") as reg:
        yield reg
