"""Cold vs warm launch of the hello example, and host-to-guest tool call latency (1 KiB payload).

    python bench/wasm_launch.py [--warm-runs 3] [--calls 50]

* cold launch: a fresh process with an empty compile cache runs the hello capsule end to end
  (compile capsule.wasm and greet.wasm, instantiate, run, write out/result.txt);
* warm launch: the same in a fresh process whose compile cache is populated (median of N);
* tool call: WasmHost.call_tool on greet with a 1 KiB input, in one process (fresh store and
  instance per call, as every real call gets; median of N);
* the same call split into its phases (one run of N calls: median of each phase and its share),
  plus the minor page faults of the guest's first touch of its fresh memory;
* host floor: the same 1 KiB call to tests/wasm/guests/counter, a hand-written component with no
  interpreter and no WASI, so what remains is mur + wasmtime-py + a bare instantiation.
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
from mur.testing.toolregistry import ToolRegistry
from mur.wasm.engine import WasmEngine
from mur.wasm.host import GuestConfig, WasmHost
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


PAYLOAD = json.dumps({"name": "x" * 1000})
COUNTER_WAT = ROOT / "tests" / "wasm" / "guests" / "counter" / "counter.wat"
PHASES = ("setup", "instantiate", "call", "post+lift", "close")


def tool_call_latency(host, cfg, calls: int) -> tuple[float, float]:
    from mur.wasm.types import ToolInput

    assert 1000 < len(PAYLOAD) <= 1024
    host.call_tool(cfg, ToolInput(PAYLOAD))  # load/compile outside the measurement
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        result = host.call_tool(cfg, ToolInput(PAYLOAD))
        samples.append(time.perf_counter() - start)
        assert result.status == "passed"
    return statistics.median(samples), min(samples)


def call_phases(host, cfg, calls: int) -> dict:
    """WasmHost._call's steps with a clock around each (same functions, same order).

    setup: path checks, compiled component from the engine's memory cache, CallContext, output;
    instantiate: fresh Store with the CallContext as data, WASI context, store limits, deadline,
    shared_linker().instantiate; call: lowering the 1 KiB ToolInput, the guest's run, lifting the
    result (wasmtime-py); post+lift: post-return and ToolResult; close: freeing the Store.
    `again` is a second call into the same instance (not something mur does: isolation forbids
    it), which tells the guest's first touch of its fresh memory from its steady-state work."""
    import resource

    from mur.wasm.host import TOOL_RUN, _Output, instantiate
    from mur.wasm.http import OutboundHttp
    from mur.wasm.callcontext import CallContext
    from mur.wasm.types import ToolInput, input_to_value, result_from_value

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    got: dict[str, list[float]] = {name: [] for name in (*PHASES, "again")}
    first_faults, again_faults = [], []
    clock = time.perf_counter_ns
    for _ in range(calls):
        t0 = clock()
        path = host._check_paths(cfg, "tool")
        component = host.engine.component(path, kind="tool", label=cfg.label)
        ctx = CallContext(kind="tool", label=cfg.label, http=OutboundHttp(list(cfg.http_allow)))
        output = _Output(None)
        t1 = clock()
        live = instantiate(host.engine, component, cfg, ctx, output.write)
        target = live.func_at(host._export(component, TOOL_RUN, "run"))
        t2 = clock()
        f0 = faults()
        value = target(live.store, input_to_value(ToolInput(PAYLOAD)))
        first_faults.append(faults() - f0)
        t3 = clock()
        target.post_return(live.store)
        assert result_from_value(value).status == "passed"
        t4 = clock()
        f0 = faults()
        target(live.store, input_to_value(ToolInput(PAYLOAD)))
        again_faults.append(faults() - f0)
        t5 = clock()
        target.post_return(live.store)
        t6 = clock()
        live.close()
        output.close()
        t7 = clock()
        for name, ns in zip((*PHASES, "again"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t7 - t6, t5 - t4)):
            got[name].append(ns / 1e6)
    out = {name: statistics.median(v) for name, v in got.items()}
    out["first_call_faults"] = statistics.median(first_faults)
    out["again_faults"] = statistics.median(again_faults)
    return out


def print_phases(title: str, ph: dict) -> None:
    total = sum(ph[name] for name in PHASES)
    print(f"{title}: phases sum {total:.3f} ms (median of each phase)")
    for name in PHASES:
        print(f"  {name:12s} {ph[name]:7.3f} ms  {ph[name] / total:6.1%}")
    print(f"  (same call again in that instance: {ph['again']:.3f} ms; minor page faults first call "
          f"{ph['first_call_faults']:.0f}, again {ph['again_faults']:.0f})")


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
    from wasmtime import wat2wasm

    from mur.manifest.capsule import Limits
    from mur.wasm.engine import WasmEngine
    from mur.wasm.host import GuestConfig, WasmHost

    host = WasmHost(engine=WasmEngine())
    with tempfile.TemporaryDirectory() as work:
        greet = GuestConfig(hello / "greet" / "greet.wasm", "greet", Path(work), [], Limits(), [])
        counter_wasm = Path(work) / "counter.wasm"
        counter_wasm.write_bytes(wat2wasm(COUNTER_WAT.read_text()))
        counter = GuestConfig(counter_wasm, "counter", None, [], Limits(), [])
        median, best = tool_call_latency(host, greet, args.calls)
        floor, floor_best = tool_call_latency(host, counter, args.calls)
        greet_ph = call_phases(host, greet, args.calls)
        counter_ph = call_phases(host, counter, args.calls)
    print(f"tool call, 1 KiB payload (median of {args.calls}): {median * 1000:.2f} ms (min {best * 1000:.2f} ms)")
    print(f"host floor, same call to the bare counter component: {floor * 1000:.3f} ms "
          f"(min {floor_best * 1000:.3f} ms); greet/floor {median / floor:.1f}x")
    print_phases("greet (componentize-py guest)", greet_ph)
    print_phases("counter (bare component)", counter_ph)
    ratio = cold["launch_s"] / warm_s
    print(f"warm/cold launch ratio: {warm_s / cold['launch_s']:.4f}  (cold is {ratio:.1f}x slower)")
    print(json.dumps({"cold_launch_s": round(cold["launch_s"], 4), "warm_launch_s": round(warm_s, 4),
                      "cold_over_warm": round(ratio, 1), "tool_call_1kib_median_ms": round(median * 1000, 3),
                      "host_floor_1kib_median_ms": round(floor * 1000, 3),
                      "phases_ms": {k: round(v, 3) for k, v in greet_ph.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
