"""The first `mur run` after `mur build` does not compile: examples/hello built in a fresh HOME with an
empty engine cache, then run, as separate `mur` processes.

The build fills `<cache>/wasm/` with the entries of the exact files `mur run -m` loads (capsule.wasm and
greet/greet.wasm, by sha256); the run loads them and writes none (a compile would replace an entry
with a new file: a new inode), so the names and inodes are unchanged. Guest builds stay cached
(the shared components/ cache is linked in), so only the engine cache starts empty.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from mur.paths import cache_root
from mur.wasm.engine import engine_fingerprint

ROOT = Path(__file__).resolve().parents[2]


def _mur(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mur", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)


def test_run_after_build_loads_the_entries_the_build_wrote(hello, home, tmp_path):
    project, cache = hello, tmp_path / "cache"
    cache.mkdir()
    (cache / "components").symlink_to(cache_root() / "components", target_is_directory=True)
    env = {**os.environ, "HOME": str(home), "MUR_CACHE_DIR": str(cache), "MUR_NO_PROGRESS": "1",
           "PYTHONPATH": str(ROOT)}
    wasm_dir = cache / "wasm"
    assert not wasm_dir.exists()

    build = _mur(["build", "hello"], tmp_path, env)
    assert build.returncode == 0, build.stderr
    assert build.stdout == "Built capsule hello: 2 components (run it with: mur run -m hello)\n"
    assert "· compiling 2 components (hello/capsule.wasm, hello/greet/greet.wasm)" in build.stderr
    wanted = sorted(f"{hashlib.sha256(p.read_bytes()).hexdigest()}.{engine_fingerprint()}.cwasm"
                    for p in (project / "capsule.wasm", project / "greet" / "greet.wasm"))
    before = {p.name: p.stat().st_ino for p in wasm_dir.iterdir()}
    assert sorted(before) == wanted

    run = _mur(["run", "-m", "hello", "-t", "Ada"], tmp_path, env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith("Hello, Ada!\n")
    assert {p.name: p.stat().st_ino for p in wasm_dir.iterdir()} == before  # loaded, none written
