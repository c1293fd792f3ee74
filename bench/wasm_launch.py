"""Cold vs warm launch of the hello example, and host-to-guest tool call latency (1 KiB payload).

    python bench/wasm_launch.py [--warm-runs 3] [--calls 50]

* cold launch: a fresh process with an empty compile cache runs the hello capsule end to end
  (compile capsule.wasm and greet.wasm, instantiate, run, write out/result.txt);
* warm launch: the same in a fresh process whose compile cache is populated (median of N);
* tool call: WasmHost.call_tool on greet with a 1 KiB input, in one process (fresh store and
  instance per call, as every real call gets; median of N).
Prints one line per measurement, then the ratios and a JSON summary line. Builds the example
components first if needed (scripts/build-examples does the same).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LAUNCH = r"""
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from mur.manifest.capsule import Limits
from mur.wasm.engine import WasmEngine
from mur.wasm.host import GuestConfig, WasmHost
from mur.wasm.registry import ToolRegistry
cache, hello, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
t1 = time.perf_counter()
engine = WasmEngine(cache_dir=cache)
host = WasmHost(engine=engine)
limits = Limits(deadline_seconds=600)
registry = ToolRegistry()
greet = GuestConfig(hello / "greet" / "greet.wasm", "greet", work, [], limits, [])
registry.register("greet", lambda data: host.call_tool(greet, data))
host.precompile(greet.wasm_path, label="greet")
host.run_capsule(GuestConfig(hello / "capsule.wasm", "hello", work, [], limits, []), registry.invoke)
t2 = time.perf_counter()
assert (work / "out" / "result.txt").read_text().strip() == "Hello, bench!"
print(json.dumps({"imports_s": t1 - t0, "launch_s": t2 - t1, "stats": engine.stats}))
"""


def launch(cache: Path, hello: Path) -> dict:
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "task.md").write_text("bench")
        proc = subprocess.run([sys.executable, "-c", LAUNCH, str(cache), str(hello), work],
                              capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"launch failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def tool_call_latency(hello: Path, calls: int) -> tuple[float, float]:
    from mur.manifest.capsule import Limits
    from mur.wasm.engine import WasmEngine
    from mur.wasm.host import GuestConfig, WasmHost
    from mur.wasm.types import ToolInput

    host = WasmHost(engine=WasmEngine())
    with tempfile.TemporaryDirectory() as work:
        cfg = GuestConfig(hello / "greet" / "greet.wasm", "greet", Path(work), [], Limits(), [])
        payload = json.dumps({"name": "x" * 1000})
        assert 1000 < len(payload) <= 1024
        host.call_tool(cfg, ToolInput(payload))  # load/compile outside the measurement
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            result = host.call_tool(cfg, ToolInput(payload))
            samples.append(time.perf_counter() - start)
            assert result.status == "passed"
    return statistics.median(samples), min(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()

    from mur.wasm.build import build_guest_dir

    hello = ROOT / "examples" / "hello"
    build_guest_dir(hello)
    build_guest_dir(hello / "greet")

    with tempfile.TemporaryDirectory() as cache_dir:
        cache = Path(cache_dir)
        cold = launch(cache, hello)
        warm = [launch(cache, hello) for _ in range(args.warm_runs)]
    assert cold["stats"]["compiled"] == 2, cold
    assert all(w["stats"]["compiled"] == 0 for w in warm), warm
    warm_s = statistics.median(w["launch_s"] for w in warm)
    print(f"cold launch (empty cache, 2 compiles):  {cold['launch_s']:.3f} s")
    print(f"warm launch (cache hit, median of {args.warm_runs}):   {warm_s:.3f} s")
    print(f"python + mur.wasm import (not in launch): {statistics.median(w['imports_s'] for w in warm):.3f} s")
    median, best = tool_call_latency(hello, args.calls)
    print(f"tool call, 1 KiB payload (median of {args.calls}): {median * 1000:.2f} ms (min {best * 1000:.2f} ms)")
    ratio = cold["launch_s"] / warm_s
    print(f"warm/cold launch ratio: {warm_s / cold['launch_s']:.4f}  (cold is {ratio:.1f}x slower)")
    print(json.dumps({"cold_launch_s": round(cold["launch_s"], 4), "warm_launch_s": round(warm_s, 4),
                      "cold_over_warm": round(ratio, 1), "tool_call_1kib_median_ms": round(median * 1000, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
