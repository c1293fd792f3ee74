"""The probe cache never answers for a cgroup whose limits changed: a non-root mur in root-owned limit
cgroups with a read-only cgroupfs (a hardened container's view, as in test_sandbox_enclosing.py) is
refused E-RUN-012 while its memory bound is above the manifest's; the operator then lowers the
bound (the fix E-RUN-012's hint asks for: a container's memory limit), and the very next `mur probe`
and the E-RUN-012 check read the new bound without `mur probe --refresh`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hostile import join_cgroups  # type: ignore[import-not-found]
from test_sandbox_enclosing import READ_ONLY_CGROUPS, enclosed  # type: ignore[import-not-found] # noqa: F401

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

BOUND = 1 << 30  # the cgroup's, at first: above the manifest's
MANIFEST = 768 << 20  # enough for the run itself (the component's compile) once the bound is lowered to it


def as_user(user, *args: str) -> subprocess.CompletedProcess:
    argv = [*READ_ONLY_CGROUPS, "setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--",
            *user.mur, *args]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(user.home), "LANG": "C.UTF-8", "MUR_NO_PROGRESS": "1"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=str(user.home),
                          preexec_fn=lambda: join_cgroups(user), env=env)


def set_memory(paths: list[str], value: int) -> None:
    for path in paths:
        for name in ("memory.max", "memory.limit_in_bytes"):
            if os.path.exists(f"{path}/{name}"):  # cgroupfs refuses to create a file: EACCES, not ENOENT
                with open(f"{path}/{name}", "w") as fh:
                    fh.write(str(value))


def test_a_lowered_limit_is_read_again_without_refresh(enclosed, tmp_path):  # noqa: F811
    user = enclosed(pids=64)
    set_memory(list(user.cgroups), BOUND)
    manifest = user.home / "cap" / "murmur.yaml"
    manifest.parent.mkdir()
    manifest.write_text(f"name: cap\nversion: \"1.0.0\"\ncapabilities:\n  shell:\n    allow: [sh]\n"
                        f"  resources:\n    cgroup_memory_bytes: {MANIFEST}\n    cgroup_pids_max: 64\n")
    # any component: the run is refused before it starts, and after the fix only E-RUN-012 matters
    shutil.copyfile(Path(__file__).resolve().parents[2] / "examples" / "hello" / "capsule.wasm",
                    manifest.parent / "capsule.wasm")
    user.chown(manifest.parent)

    first = as_user(user, "probe", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["enclosing"]["memory_bytes"] == BOUND
    refused = as_user(user, "run", "-m", str(manifest), "-t", "hi")
    assert refused.returncode == 1 and refused.stderr.startswith("error[E-RUN-012]"), refused.stderr
    assert f"bounds memory at {BOUND} bytes" in refused.stderr

    set_memory(list(user.cgroups), MANIFEST)  # the fix: the bound at the manifest's
    again = as_user(user, "probe", "--json")  # no --refresh
    assert json.loads(again.stdout)["enclosing"]["memory_bytes"] == MANIFEST
    ran = as_user(user, "run", "-m", str(manifest), "-t", "hi")
    assert "E-RUN-012" not in ran.stderr and "status:" in ran.stderr, ran.stderr
