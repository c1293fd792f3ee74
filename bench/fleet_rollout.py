"""A fleet rollout to 3 SSH targets vs 3 single deploys one after the other, measured in one run.

    python bench/fleet_rollout.py [--batch 3]

Targets: three fresh sshd "VM" containers of the integration tests (local base image + openssh, no
Python), reached over SSH on 127.0.0.1 with their host keys pinned. Capsule: examples/hello. Both
sides run the real CLI from their own clean HOME against their own three fresh targets, and do the
same work per target (runtime upload, probe, release upload, start, authenticated health): the
sequential side runs `mur deploy --no-fleet --host ...` three times; the fleet side runs one
`mur deploy` with a deploy.yaml naming the three targets (preflight everywhere first, then batches of
--batch targets at once, each gated on its health). Then each side redeploys a changed release (the
fleet: one rolling deploy; sequential: three deploys). The runtime bundle is built (or taken from
the build cache) and the components precompiled before timing starts.

Prints each timing and the ratios sequential/fleet (higher is better).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integration" / "deploy"))

from deploy_support import mur, sshd_container, sshd_image  # noqa: E402


def target_args(vm) -> list[str]:  # noqa: ANN001
    return ["--host", "127.0.0.1", "--ssh-port", str(vm.port), "--ssh-user", "root", "--ssh-key", str(vm.key),
            "--known-hosts", str(vm.known_hosts())]


def fleet_yaml(vms, batch: int) -> str:  # noqa: ANN001
    lines = ["targets:"]
    for i, vm in enumerate(vms, 1):
        lines.append(f"  web-{i}: {{host: 127.0.0.1, port: {vm.port}, user: root, key: {vm.key}, "
                     f"known_hosts: {vm.known_hosts()}}}")
    lines.append(f"rollout: {{batch: {batch}}}")
    return "\n".join(lines) + "\n"


def timed(fn) -> float:  # noqa: ANN001
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=3, help="targets the fleet switches at once")
    ns = ap.parse_args()
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    os.environ.setdefault("MUR_BUNDLE_CACHE", "/var/cache/mur-ci/bundles"
                          if os.access("/var/cache/mur-ci", os.W_OK) else str(Path(tempfile.gettempdir()) / "mur-bundles"))
    os.environ.setdefault("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))
    import docker

    client = docker.from_env(timeout=300)
    client.ping()
    if not (ROOT / "examples" / "hello" / "capsule.wasm").is_file():
        subprocess.run([str(ROOT / "scripts" / "build-examples")], check=True)
    image = sshd_image(client)
    with tempfile.TemporaryDirectory(prefix="mur-bench-fleet-") as tmp:
        tmp = Path(tmp)
        homes = {side: tmp / f"home-{side}" for side in ("seq", "fleet")}
        for h in homes.values():
            h.mkdir()
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", "from mur.runtime.bundle import ensure_local_bundle; ensure_local_bundle()"],
                       check=True, env={**os.environ, "HOME": str(homes["seq"])})
        print(f"runtime bundle ready (not timed): {time.monotonic() - t:.1f}s", file=sys.stderr)
        with ThreadPoolExecutor(max_workers=6) as pool:
            vms = list(pool.map(lambda i: sshd_container(image, tmp / f"vm{i}"), range(6)))
        try:
            seq_vms, fleet_vms = vms[:3], vms[3:]
            cap = tmp / "hello"
            shutil.copytree(ROOT / "examples" / "hello", cap, ignore=shutil.ignore_patterns("workdir", ".murmur"))
            seq_cap = tmp / "hello-seq"
            shutil.copytree(cap, seq_cap)
            (cap / "deploy.yaml").write_text(fleet_yaml(fleet_vms, ns.batch))
            manifest = str(seq_cap / "murmur.yaml")
            # warm the compile cache both sides share (not timed): precompiling is not what is compared
            mur("deploy", "-m", manifest, *target_args(seq_vms[0]), "--check", home=homes["seq"])

            def sequential(*extra: str) -> None:
                for vm in seq_vms:
                    mur("deploy", "-m", manifest, "--no-fleet", *target_args(vm), *extra, home=homes["seq"])

            def fleet(*extra: str) -> None:
                mur("deploy", *extra, home=homes["fleet"], cwd=cap)

            first_seq = timed(sequential)
            first_fleet = timed(fleet)
            again_seq = timed(lambda: sequential("--env", "BENCH=2"))
            again_fleet = timed(lambda: fleet("--env", "BENCH=2"))
        finally:
            with ThreadPoolExecutor(max_workers=6) as pool:
                list(pool.map(lambda vm: vm.close(), vms))
    print(f"first deploy, 3 targets:  sequential {first_seq:6.1f}s   fleet (batch {ns.batch}) {first_fleet:6.1f}s   "
          f"ratio {first_seq / first_fleet:.2f}x")
    print(f"new release, 3 targets:   sequential {again_seq:6.1f}s   fleet (batch {ns.batch}) {again_fleet:6.1f}s   "
          f"ratio {again_seq / again_fleet:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
