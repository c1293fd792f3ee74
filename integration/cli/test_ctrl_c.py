"""Ctrl-C at any long-running command: one `interrupted` line on stderr, exit 130, no traceback
(`mur run`'s own handling is in integration/session/test_run_interrupt.py)."""

from __future__ import annotations

import os

from mur.testing.terminal import MurProcess


def test_ctrl_c_at_a_serving_registry(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path / "home"), "NEXUS_API_KEY": "k"}
    with MurProcess("registry", "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "data"),
                    cwd=tmp_path, env=env) as mur:
        mur.wait_for(lambda: "listening on" in mur.stdout, timeout=60, what="the registry")
        mur.ctrl_c()
        assert mur.finish(30) == 130
    assert mur.stderr == "interrupted\n"
