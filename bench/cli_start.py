"""CLI start-up beside a bare interpreter: `mur --help` and `mur run --explain-scope` vs `python -c pass`.

    python bench/cli_start.py [-n 15] [--json]

`mur run --explain-scope` is timed twice: as a repeated run of the same manifest (the report is
remembered, mur.session.explain_memo, so it is read back) and as the first run after each edit of the
manifest (a copy rewritten with a new comment before every run: computed, pydantic and all).

All three run as fresh processes of the same interpreter (the one running this script, so site and
the installed packages are the same), interleaved round by round, from one fresh HOME whose cache
the first (untimed) round fills: the kernel probe's per-boot cache, like every run after the first
on a machine. The first round is printed apart (cold: the probe runs for real). Prints medians, the
10th-90th percentile spread and each command's ratio to `python -c pass`.

Bytecode is cached the way an installed mur has it (pip compiles at install): the runs write .pyc
files into a private PYTHONPYCACHEPREFIX under that HOME, even where PYTHONDONTWRITEBYTECODE is set
(as on CI), so no command pays for compiling mur's sources on every start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "examples" / "hello" / "murmur.yaml"


EDITED = "mur run --explain-scope, edited"


def commands(edited: Path) -> dict[str, list[str]]:
    script = Path(sys.executable).parent / "mur"  # the console script a user runs
    mur = [str(script)] if script.is_file() else [sys.executable, "-m", "mur"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "mur --help": mur + ["--help"],
        "mur run --explain-scope": mur + ["run", "-m", str(MANIFEST), "--explain-scope"],
        EDITED: mur + ["run", "-m", str(edited), "--explain-scope"],
    }


class Editor:
    """A copy of the example manifest, changed (a comment) before every run that uses it."""

    def __init__(self, directory: Path):
        self.path = directory / "murmur.yaml"
        self.text = MANIFEST.read_text(encoding="utf-8")
        self.count = 0
        self.edit()

    def edit(self) -> None:
        self.count += 1
        self.path.write_text(f"{self.text}\n# edit {self.count}\n", encoding="utf-8")


def timed(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    took = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15, help="runs per command (default 15)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mur-bench-home-") as home:
        editor = Editor(Path(home))
        table = commands(editor.path)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MUR_", "MURMUR_"))}
        env["HOME"] = home
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(home, "pycache")  # filled by the cold round
        cold = {name: timed(argv, env) for name, argv in table.items()}  # fills the probe cache
        samples: dict[str, list[float]] = {name: [] for name in table}
        names = list(table)
        for i in range(args.n):
            for name in names[i % len(names):] + names[:i % len(names)]:
                if name == EDITED:
                    editor.edit()
                samples[name].append(timed(table[name], env))
    base = statistics.median(samples["python -c pass"])
    rows = {}
    for name, s in samples.items():
        deciles = statistics.quantiles(s, n=10)
        rows[name] = {"median_s": statistics.median(s), "p10_s": deciles[0], "p90_s": deciles[-1],
                      "over_python": statistics.median(s) / base, "cold_s": cold[name]}
    if args.json:
        print(json.dumps({"n": args.n, "rows": {k: {f: round(v, 4) for f, v in r.items()} for k, r in rows.items()}}))
        return 0
    print(f"{sys.executable} (python {sys.version.split()[0]}); n={args.n} per command, interleaved; "
          "cold = the first run in a fresh HOME")
    print(f"{'command':<34} {'median':>8} {'p10..p90':>15} {'/python':>8} {'cold':>8}")
    for name, r in rows.items():
        print(f"{name:<34} {r['median_s'] * 1000:6.0f}ms {r['p10_s'] * 1000:6.0f}..{r['p90_s'] * 1000:4.0f}ms "
              f"{r['over_python']:7.2f}x {r['cold_s'] * 1000:6.0f}ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
