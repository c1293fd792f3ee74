"""Benchmark: one sandboxed shell call vs a bare subprocess of the same command (one run, a ratio).

    python bench/shell_sandbox.py [-n 50] [--command 'echo hello > out.txt']

Both sides run ``bash -c <command>`` in the same directory with the same environment; the sandboxed
side goes through ShellSandbox.run (cgroup join, rlimits, uid drop as root, noexec mount namespace
as root, Landlock, seccomp, output capture). The one-time ShellSandbox.start cost (cgroup creation,
ELF closure, ruleset build, BPF compilation, workdir ACL grant) is printed separately.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mur.manifest.capsule import Capabilities  # noqa: E402
from mur.sandbox.probe import probe_host  # noqa: E402
from mur.sandbox.shell import ShellSandbox, shell_env  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=50, help="calls per side (default 50)")
    parser.add_argument("--command", default="echo hello > out.txt && echo done", help="the bash -c script")
    args = parser.parse_args()

    probe = probe_host()
    caps = Capabilities.model_validate({"shell": {"allow": ["bash"]}}, strict=False)
    workdir = Path(tempfile.mkdtemp(prefix="mur-bench-"))
    host_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    bash = shutil.which("bash", path=host_env["PATH"])
    env = shell_env(caps, workdir, host_env)
    sandbox = ShellSandbox(caps, workdir, f"ses_bench{os.getpid()}", [], probe=probe, host_env=host_env)
    try:
        began = time.perf_counter()
        sandbox.start()
        start_ms = (time.perf_counter() - began) * 1000

        sandboxed, plain = [], []
        for i in range(args.n + 1):  # interleaved, so load changes hit both sides alike; call 0 warms up
            began = time.perf_counter()
            result = sandbox.run("bash", command=args.command)
            t_sandboxed = time.perf_counter() - began
            began = time.perf_counter()
            bare = subprocess.run([bash, "-c", args.command], cwd=workdir, env=env, capture_output=True)
            t_plain = time.perf_counter() - began
            if result.exit_code != 0 or bare.returncode != 0:
                print(f"command failed: sandboxed rc {result.exit_code} {result.stderr!r}, bare rc {bare.returncode}",
                      file=sys.stderr)
                return 1
            if i:
                sandboxed.append(t_sandboxed)
                plain.append(t_plain)
    finally:
        sandbox.close()
        shutil.rmtree(workdir, ignore_errors=True)

    s_ms, b_ms = statistics.median(sandboxed) * 1000, statistics.median(plain) * 1000
    print(f"host: tier={probe.tier} landlock_abi={probe.landlock_abi} cgroups={probe.cgroup_mode} "
          f"uid={'root->65534' if os.geteuid() == 0 else os.geteuid()}")
    print(f"ShellSandbox.start: {start_ms:.1f} ms (once per session)")
    print(f"sandboxed/bare ratio: {s_ms / b_ms:.1f}x (sandboxed {s_ms:.1f} ms, bare {b_ms:.1f} ms, n={args.n}, medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
