"""First deploy vs unchanged redeploy to the same SSH target, measured in one run.

    python bench/deploy_redeploy.py [--rounds 3]

Target: the sshd "VM" container of the integration tests (local base image + openssh, no Python),
started fresh, reached over SSH on 127.0.0.1 with its host key pinned. Capsule: examples/hello.
Each deploy runs the real CLI from the same clean HOME. The runtime bundle is built (or taken
from the build cache) before timing starts, so "first" measures what a user's first deploy to a
new machine costs: runtime upload, probe, release upload, precompiled components, start.
Prints each timing, the bytes uploaded, and the ratio first/unchanged (higher is better).
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
sys.path.insert(0, str(ROOT / "integration" / "deploy"))

from deploy_support import mur, sshd_container, sshd_image  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="unchanged redeploys to time (median is reported)")
    ns = ap.parse_args()
    os.environ.setdefault("MUR_BUNDLE_CACHE", "/var/cache/mur-ci/bundles"
                          if os.access("/var/cache/mur-ci", os.W_OK) else str(Path(tempfile.gettempdir()) / "mur-bundles"))
    import docker

    client = docker.from_env(timeout=300)
    client.ping()
    if not (ROOT / "examples" / "hello" / "capsule.wasm").is_file():
        subprocess.run([str(ROOT / "scripts" / "build-examples")], check=True)
    with tempfile.TemporaryDirectory(prefix="mur-bench-") as tmp:
        tmp = Path(tmp)
        home = tmp / "home"
        home.mkdir()
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", "from mur.runtime.bundle import ensure_local_bundle; ensure_local_bundle()"],
                       check=True, env={**os.environ, "HOME": str(home)})
        print(f"runtime bundle ready (not timed): {time.monotonic() - t:.1f}s", file=sys.stderr)
        vm = sshd_container(sshd_image(client), tmp / "sshd")
        try:
            args = ["deploy", "-m", str(ROOT / "examples" / "hello" / "murmur.yaml"), "--host", "127.0.0.1",
                    "--ssh-port", str(vm.port), "--ssh-key", str(vm.key), "--known-hosts", str(vm.known_hosts()),
                    "--json"]
            t = time.monotonic()
            first = json.loads(mur(*args, home=home).stdout)
            first_s = time.monotonic() - t
            again = []
            for _ in range(ns.rounds):
                t = time.monotonic()
                res = json.loads(mur(*args, home=home).stdout)
                again.append(time.monotonic() - t)
                assert res["unchanged"] and res["uploaded"] == 0, res
            t = time.monotonic()
            changed = json.loads(mur(*args, "--env", "HELLO_GREETING=Hi", home=home).stdout)
            changed_s = time.monotonic() - t
            mur("deploy", "destroy", first["deployment_id"], home=home)
        finally:
            vm.close()
    med = statistics.median(again)
    print(f"first deploy:        {first_s:7.2f}s  ({first['uploaded']} files, {first['uploaded_bytes'] / 1e6:.1f} MB uploaded)")
    print(f"unchanged redeploy:  {med:7.2f}s  (median of {ns.rounds}: {', '.join(f'{x:.2f}' for x in again)}; 0 files uploaded)")
    print(f"config-only change:  {changed_s:7.2f}s  ({changed['uploaded']} files uploaded, release {changed['release']})")
    print(f"ratio first/unchanged: {first_s / med:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
