"""Fixtures for the inference integration tests: the real claude CLI, the real driver component.

The claude CLI comes from npm (`.ci/install-claude.sh`); it is found through $MUR_CLAUDE_BIN, then
`claude` on PATH, then the install script's default prefix. The driver component is built from
examples/murmur-driver-anthropic with mur's componentize-py tooling (integration/conftest.py; cached).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mur.testing.modelserver import ModelServer

DEFAULT_PREFIX = Path(os.environ.get("MUR_CLAUDE_PREFIX", Path.home() / ".cache" / "mur" / "claude-cli"))


def find_claude() -> str | None:
    """The claude CLI binary: $MUR_CLAUDE_BIN, `claude` on PATH, or the install script's prefix."""
    explicit = os.environ.get("MUR_CLAUDE_BIN")
    if explicit and os.access(explicit, os.X_OK):
        return explicit
    on_path = shutil.which("claude")
    if on_path:
        return on_path
    default = DEFAULT_PREFIX / "node_modules" / ".bin" / "claude"
    return str(default) if os.access(default, os.X_OK) else None


# The repository conftest's `requires_claude` check looks at $MUR_CLAUDE_BIN and PATH; point it at
# the install script's prefix when that is where the CLI lives.
if not os.environ.get("MUR_CLAUDE_BIN") and find_claude():
    os.environ["MUR_CLAUDE_BIN"] = find_claude()  # type: ignore[assignment]


@pytest.fixture(scope="session")
def claude_bin() -> str:
    found = find_claude()
    if found is None:
        pytest.skip("the claude CLI is not installed (run .ci/install-claude.sh)")
    return found


@pytest.fixture
def claude_env(claude_bin, home):
    """`claude_env(server)` -> the CLI's environment pointed at the loopback model server."""

    def make(server: ModelServer) -> dict[str, str]:
        return {
            "PATH": f"{Path(claude_bin).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-loopback-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }

    return make


@pytest.fixture(scope="session")
def wasm_host():
    from mur.wasm.engine import WasmEngine
    from mur.wasm.host import WasmHost

    engine = WasmEngine()
    yield WasmHost(engine=engine)
    engine.close()
