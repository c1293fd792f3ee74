"""CLI start-up beside a bare interpreter: `mur --help`, `mur run --explain-scope` after an edit and a
warm `mur run --task` of examples/hello, against `python -c pass`.

    python bench/cli_start.py [-n 15] [--baseline OTHER_PYTHON] [--json]

Every row is a fresh process of the interpreter running this script (its `mur` console script, so
site and the installed packages are the same), interleaved round by round, from one fresh HOME:

* `mur --help`;
* `mur run --explain-scope`, edited: a copy of the example manifest rewritten with a new comment
  before every run (nothing can be reused: parsed, validated, probed and reported every time);
* `mur run -t`: a warm run of a copy of examples/hello (its components compiled in the shared
  cache, the kernel probe's per-boot answer cached): what a user waits for on every run.

The two `mur run` rows run twice, as a script runs them (no terminal) by default, and in-process
(`, in-process`: MUR_CAPSULE_HOST=off, what the first runs do, before a host runs; at a terminal
the same as here). By default both go to the capsule host, which the cold round's second good
run starts (docs/run.md); its CPU and its capsules' are counted.

The first (untimed) round fills the caches; it is printed apart as `cold`; a second untimed round
runs once the host is up. With `--baseline`,
the same rows run with another interpreter's mur too (e.g. a venv with the previous version
installed), interleaved in the same rounds, each beside its own `python -c pass`: before and after
in one run. Prints medians of wall time (with the 10th-90th percentile spread) and of CPU time (user +
system: what a loaded machine changes least), each as a ratio to its interpreter's `python -c pass`,
and the machine's load.

Bytecode is cached the way an installed mur has it (pip compiles at install): the runs write .pyc
files into a private PYTHONPYCACHEPREFIX under that HOME, even where PYTHONDONTWRITEBYTECODE is set
(as on CI), so no command pays for compiling mur's sources on every start.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mur.testing.caphosts import host_pids, stop_hosts, wait_for_host

ROOT = Path(__file__).resolve().parents[1]
HELLO = ROOT / "examples" / "hello"
PASS, HELP, EDITED, WARM = "python -c pass", "mur --help", "mur run --explain-scope, edited", "mur run -t (warm)"
IN_PROCESS = ", in-process"  # MUR_CAPSULE_HOST=off: what an interactive run does
OFF = {"MUR_CAPSULE_HOST": "off"}


def commands(python: str, edited: Path, hello: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each row: its argv and what it adds to the environment."""
    script = Path(python).parent / "mur"  # the console script a user runs
    mur = [str(script)] if script.is_file() else [python, "-m", "mur"]
    explain = mur + ["run", "-m", str(edited), "--explain-scope"]
    warm = mur + ["run", "-m", str(hello), "-t", "Ada"]
    return {
        PASS: ([python, "-c", "pass"], {}),
        HELP: (mur + ["--help"], {}),
        EDITED: (explain, {}),
        EDITED + IN_PROCESS: (explain, OFF),
        WARM: (warm, {}),
        WARM + IN_PROCESS: (warm, OFF),
    }


def host_cpu(home: str) -> float:
    """CPU seconds of the capsule host and the capsules it reaped so far (0 when none runs): a run
    it took is counted in neither the client's rusage nor this process's children."""
    total = 0.0
    for pid in host_pids(home):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
    return total


class Editor:
    """A copy of the example manifest, changed (a comment) before every run that uses it."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True)
        self.path = directory / "murmur.yaml"
        self.text = (HELLO / "murmur.yaml").read_text(encoding="utf-8")
        self.count = 0
        self.edit()

    def edit(self) -> None:
        self.count += 1
        self.path.write_text(f"{self.text}\n# edit {self.count}\n", encoding="utf-8")


def timed(argv: list[str], env: dict[str, str], cpu: list[float] | None = None) -> float:
    """Wall seconds of one run; its CPU seconds (user + system, children included, and the capsule
    host's share when the run went to it) go to `cpu`."""
    before, host_before = resource.getrusage(resource.RUSAGE_CHILDREN), host_cpu(env["HOME"])
    began = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        host = max(0.0, host_cpu(env["HOME"]) - host_before)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime + host)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15, help="runs per command (default 15)")
    parser.add_argument("--baseline", help="another interpreter whose mur runs the same rows (before)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    for wasm in (HELLO / "capsule.wasm", HELLO / "greet" / "greet.wasm"):
        if not wasm.is_file():
            sys.exit(f"{wasm} is missing: run scripts/build-examples first")
    pythons = {"": sys.executable} | ({"before: ": args.baseline} if args.baseline else {})
    with tempfile.TemporaryDirectory(prefix="mur-bench-home-") as home:
        editor = Editor(Path(home) / "edited")
        hello = Path(home) / "hello"
        shutil.copytree(HELLO, hello, ignore=shutil.ignore_patterns("workdir", ".murmur", "__pycache__"))
        table: dict[str, tuple[list[str], dict[str, str]]] = {}
        for label, python in pythons.items():
            table.update({label + name: row for name, row in commands(python, editor.path, hello).items()})
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MUR_", "MURMUR_"))}
        env["HOME"] = home
        env["MUR_CACHE_DIR"] = os.environ.get("MUR_CACHE_DIR") or str(Path.home() / ".murmur" / "cache")  # warm
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(home, "pycache")  # filled by the cold round
        cold = {name: timed(argv, {**env, **extra}) for name, (argv, extra) in table.items()}  # fills the caches
        wait_for_host(home)  # the cold round's second good run started it: not its imports in a timed run
        for argv, extra in table.values():
            timed(argv, {**env, **extra})
        samples: dict[str, list[float]] = {name: [] for name in table}
        cpus: dict[str, list[float]] = {name: [] for name in table}
        names = list(table)
        for i in range(args.n):
            for name in names[i % len(names):] + names[:i % len(names)]:
                if EDITED in name:
                    editor.edit()
                argv, extra = table[name]
                samples[name].append(timed(argv, {**env, **extra}, cpus[name]))
        stop_hosts(home)
    rows = {}
    for name, s in samples.items():
        label = name[: len(name) - len(name.split(": ")[-1])] if ": " in name else ""
        base = statistics.median(samples[label + PASS])
        deciles = statistics.quantiles(s, n=10)
        cpu_base = statistics.median(cpus[label + PASS])
        rows[name] = {"median_s": statistics.median(s), "p10_s": deciles[0], "p90_s": deciles[-1],
                      "over_python": statistics.median(s) / base, "cold_s": cold[name],
                      "cpu_s": statistics.median(cpus[name]), "cpu_over_python": statistics.median(cpus[name]) / cpu_base}
    load = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps({"n": args.n, "load": load,
                          "rows": {k: {f: round(v, 4) for f, v in r.items()} for k, r in rows.items()}}))
        return 0
    print(f"{sys.executable} (python {sys.version.split()[0]}); n={args.n} per command, interleaved; "
          f"cold = the first run in a fresh HOME; load {load}")
    print(f"{'command':<46} {'median':>8} {'p10..p90':>15} {'/python':>8} {'CPU':>7} {'/python':>8} {'cold':>8}")
    for name, r in rows.items():
        print(f"{name:<46} {r['median_s'] * 1000:6.0f}ms {r['p10_s'] * 1000:6.0f}..{r['p90_s'] * 1000:4.0f}ms "
              f"{r['over_python']:7.2f}x {r['cpu_s'] * 1000:5.0f}ms {r['cpu_over_python']:7.2f}x {r['cold_s'] * 1000:6.0f}ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
