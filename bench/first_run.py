"""The first `mur run` of examples/hello in an empty HOME, tiered (fast compile now, the optimized one in
the background for the next launch) against compiling optimized first; then after `mur build` /
`mur install`, warm, and ensure_compiled's two components on one thread against one per core.

Each figure is a real `mur` process in a fresh HOME with an empty engine cache (`MUR_CACHE_DIR` in a
temp dir; the guest-build cache, components/, is linked in so `mur build` does not re-run
componentize-py). Figures:

* cold, tiered:     `mur run` with nothing compiled (the default: Winch compiles both components,
                    the answer follows, a background process compiles them optimized);
* next launch:      `mur run` again once that background compile is done (optimized, nothing compiled);
* cold, optimized:  the same first run with MUR_WASM_TIERING=off (compiled optimized before the
                    answer: what every first run did before tiers), in the same bench run;
* build:            `mur build examples/hello` (compiles both into the cache), then the first `mur run`;
* install:          `mur install -g greet.mur.zip` (compiles its component), then the same install again;
* warm:             `mur run` once more;
* serial vs parallel: ensure_compiled of the two components with jobs=1 and jobs=2 in this process.

The examples' components must be built first (scripts/build-examples). Ratios, not targets: the
machine is shared (its load is printed). usage: python bench/first_run.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mur.paths import cache_root

ROOT = Path(__file__).resolve().parents[1]
HELLO = ROOT / "examples" / "hello"


def fresh(tmp: Path, name: str) -> dict[str, str]:
    """Environment for a fresh HOME and an empty engine cache (guest builds shared)."""
    home, cache = tmp / name / "home", tmp / name / "cache"
    home.mkdir(parents=True)
    cache.mkdir()
    (cache / "components").symlink_to(cache_root() / "components", target_is_directory=True)
    return {**os.environ, "HOME": str(home), "MUR_CACHE_DIR": str(cache), "MUR_NO_PROGRESS": "1",
            "PYTHONPATH": str(ROOT)}


def optimized_entries(env: dict[str, str]) -> int:
    from mur.wasm.engine import engine_fingerprint

    return len(list(Path(env["MUR_CACHE_DIR"], "wasm").glob(f"*.{engine_fingerprint()}.cwasm")))


def wait_for_tier_up(env: dict[str, str], count: int, timeout: float = 600.0) -> float:
    """Seconds until the background compile wrote `count` optimized entries."""
    started = time.monotonic()
    while optimized_entries(env) < count and time.monotonic() - started < timeout:
        time.sleep(0.2)
    return time.monotonic() - started


def mur(args: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mur", *args], env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"mur {' '.join(args)} failed:\n{done.stderr}")
    return time.monotonic() - started


def compile_both(jobs: int, tmp: Path) -> float:
    from mur.wasm.compile import Source, ensure_compiled
    from mur.wasm.engine import WasmEngine

    engine = WasmEngine(cache_dir=tmp / f"jobs{jobs}")
    sources = [Source("capsule", path=HELLO / "capsule.wasm"), Source("greet", path=HELLO / "greet" / "greet.wasm")]
    started = time.monotonic()
    done = ensure_compiled(sources, engine=engine, jobs=jobs)
    assert [d.status for d in done] == ["compiled", "compiled"], done
    return time.monotonic() - started


def main() -> None:
    for wasm in (HELLO / "capsule.wasm", HELLO / "greet" / "greet.wasm"):
        if not wasm.is_file():
            sys.exit(f"{wasm} is missing: run scripts/build-examples first")
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        project = tmp / "hello"
        shutil.copytree(HELLO, project, ignore=shutil.ignore_patterns("workdir", ".murmur", "*.mur.zip"))
        run = ["run", "-m", "hello", "-t", "Ada"]

        env = fresh(tmp, "tiered")
        tiered = mur(run, env, tmp)
        tier_up = wait_for_tier_up(env, 2)
        next_launch = mur(run, env, tmp)

        env = fresh(tmp, "cold")
        env["MUR_WASM_TIERING"] = "off"
        cold = mur(run, env, tmp)

        env = fresh(tmp, "built")
        build = mur(["build", "hello"], env, tmp)
        after_build = mur(run, env, tmp)
        warm = min(mur(run, env, tmp) for _ in range(3))

        zip_path = tmp / "greet.mur.zip"
        mur(["build", "hello/greet", "-o", str(zip_path), "--no-compile"], env, tmp)
        env = fresh(tmp, "installed")
        install = mur(["install", "-g", str(zip_path)], env, tmp)
        install_again = mur(["install", "-g", str(zip_path)], env, tmp)

        serial = compile_both(1, tmp)
        parallel = compile_both(2, tmp)

    print(f"load {[round(x, 2) for x in os.getloadavg()]}, {os.cpu_count()} CPUs")
    print(f"cold first run, tiered          {tiered:7.2f} s   {cold / tiered:5.1f}x faster than optimized first")
    print(f"  background optimize done      {tier_up:7.2f} s later")
    print(f"  next launch (optimized)       {next_launch:7.2f} s")
    print(f"cold first run, optimized first {cold:7.2f} s   (MUR_WASM_TIERING=off: compiles 2 before the answer)")
    print(f"mur build (compiles 2)          {build:7.2f} s")
    print(f"first run after build           {after_build:7.2f} s   {cold / after_build:5.1f}x faster than cold")
    print(f"warm run (best of 3)            {warm:7.2f} s   first-after-build / warm = {after_build / warm:.2f}")
    print(f"mur install (compiles 1)        {install:7.2f} s")
    print(f"mur install again (cached)      {install_again:7.2f} s   {install / install_again:5.1f}x")
    print(f"compile 2, one thread           {serial:7.2f} s")
    print(f"compile 2, two threads          {parallel:7.2f} s   serial / parallel = {serial / parallel:.2f}")


if __name__ == "__main__":
    main()
