"""The cost of the tools' composed root and the kernel-counted disk (issue 27): one shell call and one
session start, beside today's view (the host's tree, read-only, with the st_blocks watcher), a bare
subprocess and bubblewrap, in one run (ratios).

    python bench/sandbox_view.py [-n 60] [--starts 8] [--files 0] [--command 'ls /usr/bin | wc -l'] [--json]

Sides of a call (interleaved rounds, a rotating order, round 0 warms up):
* bare: ``subprocess.run(bash -c ...)``, no isolation;
* mur sealed: ``ShellSandbox.run`` in the composed root, the workdir on the session disk
  (ext4-loop as root, tmpfs otherwise: what this host gives);
* mur host-view: the same sandbox on a probe that says no composed root can be built here (the
  read-only host view, the st_blocks watcher): the view as it was before the composed root;
* bubblewrap: ``bwrap --unshare-all`` with /usr read-only and the workdir bound.

Session start: ``ShellSandbox.start()`` + ``close()`` of each mur side (``--starts`` rounds,
interleaved; ``--files N`` puts N small files in the workdir first, which the sealed side copies onto
the disk and back), beside one bubblewrap call (its whole cost is per call). The budget the issue
sets: a sealed call within 1.0 x bare + 5 ms.
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
from dataclasses import replace
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mur.fsafe import Tree  # noqa: E402
from mur.manifest.capsule import Capabilities  # noqa: E402
from mur.sandbox.probe import probe_host  # noqa: E402
from mur.sandbox.shell import ShellSandbox, shell_env  # noqa: E402

HOST_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def spread(samples: list[float]) -> tuple[float, float, float]:
    deciles = statistics.quantiles(samples, n=10) if len(samples) > 1 else samples * 9
    return statistics.median(samples) * 1000, deciles[0] * 1000, deciles[-1] * 1000


def remove(path: Path) -> None:
    with Tree(path.parent) as parent:
        parent.remove_tree(path.name)


def populate(workdir: Path, files: int) -> None:
    for i in range(files):
        sub = workdir / f"d{i // 100}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i}.txt").write_text(f"file {i}\n" * 8)


def bwrap_call(command: str, workdir: Path, env: dict[str, str]) -> Callable[[], tuple[int, bytes]] | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        if os.path.islink("/" + name) and os.readlink("/" + name).startswith("usr/"):
            argv += ["--symlink", os.readlink("/" + name), "/" + name]
    argv += ["--dev", "/dev", "--proc", "/proc", "--bind", str(workdir), str(workdir), "--chdir", str(workdir)]
    if os.geteuid() == 0:
        argv += ["--uid", "65534", "--gid", "65534"]
    argv += ["bash", "-c", command]

    def call() -> tuple[int, bytes]:
        proc = subprocess.run(argv, env=env, capture_output=True)
        return proc.returncode, proc.stdout

    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=60, help="calls per side (default 60)")
    parser.add_argument("--starts", type=int, default=8, help="session starts per mur side (default 8)")
    parser.add_argument("--files", type=int, default=0, help="small files in the workdir for the start rounds")
    parser.add_argument("--command", default="ls /usr/bin | wc -l", help="the bash -c script")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()

    probe = probe_host()
    if not probe.sealed:
        print(f"this host builds no composed root: {probe.sealed_reason}", file=sys.stderr)
        return 2
    hosted = replace(probe, sealed=False, sealed_reason="bench: the host's view", achieved="scoped",
                     disk_loop=False, disk_tmpfs=False)
    caps = Capabilities.model_validate({"shell": {
        "allow": ["bash", "ls", "wc"],
        "interpreter_runtime": [{"binary": "bash", "dirs": [{"path": "/usr/bin", "list_dir": True}]}]},
        "resources": {"workdir_max_bytes": 1 << 30}}, strict=False)
    base = Path(tempfile.mkdtemp(prefix="mur-bench-view-"))
    os.chmod(base, 0o755)
    probes = {"mur sealed": probe, "mur host-view": hosted}
    boxes: dict[str, ShellSandbox] = {}
    started: dict[str, float] = {}
    try:
        for name, p in probes.items():
            workdir = base / name.replace(" ", "-")
            workdir.mkdir()
            began = time.perf_counter()
            box = ShellSandbox(caps, workdir, f"ses_bench{os.getpid()}{len(boxes)}", [], probe=p, host_env=HOST_ENV)
            box.start()
            started[name] = (time.perf_counter() - began) * 1000
            boxes[name] = box
        bare_dir = base / "bare"
        bare_dir.mkdir()
        env = shell_env(caps, bare_dir, HOST_ENV)
        sides: dict[str, Callable[[], tuple[int, bytes]] | None] = {
            "bare": lambda: (lambda p: (p.returncode, p.stdout))(
                subprocess.run(["bash", "-c", args.command], cwd=bare_dir, env=env, capture_output=True)),
            **{name: (lambda b=box: (lambda r: (r.exit_code, r.stdout.encode()))(b.run("bash", command=args.command)))
               for name, box in boxes.items()},
            "bubblewrap": bwrap_call(args.command, bare_dir, env),
        }
        present = [n for n, s in sides.items() if s is not None]
        calls: dict[str, list[float]] = {n: [] for n in present}
        expected = None
        for i in range(args.n + 1):
            for name in present[i % len(present):] + present[:i % len(present)]:
                began = time.perf_counter()
                rc, out = sides[name]()  # type: ignore[misc]
                took = time.perf_counter() - began
                if rc != 0 or (expected is not None and out != expected):
                    print(f"{name}: rc {rc}, {out[:200]!r}", file=sys.stderr)
                    return 1
                expected = out
                if i:
                    calls[name].append(took)
    finally:
        for box in boxes.values():
            box.close()
    starts: dict[str, list[float]] = {n: [] for n in probes}
    try:
        for i in range(args.starts):
            for name, p in (list(probes.items())[::-1] if i % 2 else probes.items()):
                workdir = base / f"start-{i}-{name.replace(' ', '-')}"
                workdir.mkdir()
                populate(workdir, args.files)
                began = time.perf_counter()
                box = ShellSandbox(caps, workdir, f"ses_benchs{os.getpid()}{i}", [], probe=p, host_env=HOST_ENV)
                box.start()
                box.close()
                starts[name].append(time.perf_counter() - began)
    finally:
        remove(base)

    stats = {n: spread(s) for n, s in calls.items()}
    start_stats = {n: spread(s) for n, s in starts.items()}
    bare = stats["bare"][0]
    bwrap = stats.get("bubblewrap", (None,))[0]
    sealed = stats["mur sealed"][0]
    within = sealed <= bare * 1.0 + 5.0
    if args.json:
        print(json.dumps({
            "command": args.command, "n": args.n, "files": args.files, "disk": boxes["mur sealed"].policy.disk.mechanism,
            "calls": {n: {"median_ms": round(m, 3), "p10_ms": round(lo, 3), "p90_ms": round(hi, 3),
                          "over_bare": round(m / bare, 3), "over_bubblewrap": round(m / bwrap, 3) if bwrap else None}
                      for n, (m, lo, hi) in stats.items()},
            "starts": {n: {"median_ms": round(m, 2), "p10_ms": round(lo, 2), "p90_ms": round(hi, 2)}
                       for n, (m, lo, hi) in start_stats.items()},
            "sealed_call_within_bare_plus_5ms": within,
        }))
        return 0
    print(f"host: {probe.mechanism}, disk {boxes['mur sealed'].policy.disk.mechanism}, "
          f"uid {'root (tools as a session uid)' if os.geteuid() == 0 else os.geteuid()}")
    print(f"call: bash -c {args.command!r}; n={args.n} per side, interleaved")
    print(f"{'side':<15} {'median':>9} {'p10..p90':>17} {'/bare':>7} {'/bwrap':>7}")
    for name, (m, lo, hi) in stats.items():
        vs = f"{m / bwrap:6.2f}x" if bwrap else "      -"
        print(f"{name:<15} {m:7.2f}ms {lo:7.2f}..{hi:6.2f}ms {m / bare:6.2f}x {vs}")
    print(f"sealed call {sealed:.2f} ms vs budget 1.0 x bare + 5 ms = {bare + 5:.2f} ms: "
          f"{'within' if within else 'OVER'}")
    print(f"session start + close ({args.starts} each, {args.files} files in the workdir):")
    for name, (m, lo, hi) in start_stats.items():
        print(f"{name:<15} {m:7.1f}ms {lo:7.1f}..{hi:6.1f}ms")
    if bwrap:
        print(f"{'bubblewrap':<15} {bwrap:7.1f}ms (its whole cost is per call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
