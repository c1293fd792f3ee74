"""Helpers for the fleet tests: a deploy.yaml for sshd "VMs" (and this machine), what each target serves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from deploy_support import mur


def fleet_dir(capsule: Path, dest: Path, vms, *, local: bool = False, rollout: dict | None = None,
              groups: dict | None = None, target_extra: dict | None = None) -> Path:
    """A copy of the capsule with a deploy.yaml naming web-1..web-N (the VMs, as root) and `here`."""
    shutil.copytree(capsule, dest, ignore=shutil.ignore_patterns("workdir", ".murmur", "__pycache__", "deploy*.yaml"))
    targets: dict = {}
    for i, vm in enumerate(vms, 1):
        targets[f"web-{i}"] = {"host": "127.0.0.1", "port": vm.port, "user": "root", "key": str(vm.key),
                               "known_hosts": str(vm.known_hosts())}
    if local:
        targets["here"] = {"local": True, "no_boot_hook": True}
    for name, extra in (target_extra or {}).items():
        targets[name].update(extra)
    # published: the containers share this machine's network, so clients reach each service directly
    # (a loopback-bound SSH service is reached through a tunnel, `mur deploy` prints its command)
    doc: dict = {"defaults": {"publish": True}, "targets": targets}
    if groups:
        doc["groups"] = groups
    if rollout:
        doc["rollout"] = rollout
    (dest / "deploy.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def rollout(capsule_dir: Path, home: Path, *args: str, check: bool = True, timeout: float = 900,
            env: dict | None = None) -> tuple[int, dict, str]:
    """`mur deploy --json` in the capsule's directory: (exit status, the report, stderr)."""
    proc = mur("deploy", "--json", *args, home=home, cwd=capsule_dir, check=False, timeout=timeout, env=env)
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report = {}
    if check and proc.returncode != 0:
        raise AssertionError(f"mur deploy failed ({proc.returncode}):\n{proc.stderr[-5000:]}\n{proc.stdout[-2000:]}")
    return proc.returncode, report, proc.stderr


def by_target(report: dict) -> dict[str, dict]:
    return {t["target"]: t for t in report["targets"]}


def releases_on(vm, home: str = "/root") -> list[str]:
    """Release numbers present on a VM, for every deployment (a preflight failure must change none)."""
    _, out = vm.sh(f"ls -1d {home}/.murmur/deployments/*/releases/* 2>/dev/null | sort")
    return out.split()
