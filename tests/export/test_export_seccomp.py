"""The pod's seccomp profile: Landlock allowed, and never weaker than the Docker target's profile."""

from __future__ import annotations

import json
from pathlib import Path

from mur.export.seccomp import DENIED, LANDLOCK, profile, profile_bytes

ROOT = Path(__file__).resolve().parents[2]


def denied(p: dict) -> set[str]:
    return {n for s in p["syscalls"] if s["action"] == "SCMP_ACT_ERRNO" for n in s["names"]}


def test_landlock_allowed_and_the_rest_denied_with_eperm():
    p = json.loads(profile_bytes())
    assert p == profile() and p["defaultAction"] == "SCMP_ACT_ALLOW"
    allow = [s for s in p["syscalls"] if s["action"] == "SCMP_ACT_ALLOW"]
    assert allow == [{"names": list(LANDLOCK), "action": "SCMP_ACT_ALLOW"}]
    errno = [s for s in p["syscalls"] if s["action"] == "SCMP_ACT_ERRNO"]
    assert errno[0]["errnoRet"] == 1 and set(errno[0]["names"]) == set(DENIED)
    assert not set(LANDLOCK) & set(DENIED)


def test_denies_everything_the_docker_targets_profile_denies_and_mount():
    docker = json.loads((ROOT / "images" / "seccomp-landlock.json").read_text())
    assert denied(docker) <= denied(profile())
    assert "mount" in denied(profile()) and "mount" not in denied(docker)  # the pod has no capability to use it
