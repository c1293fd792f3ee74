"""Fixtures of the deploy fault suite (integration/deploy/faults): fault_harness.py has the pieces,
STATUS.md what passes against the latest product branch.

`pool` is the session's set of serving targets (each an sshd container behind a fault relay with
one deployment), shared by the scenarios that fault a redeploy; at the end of the session every
one is destroyed and checked for leftovers. Scenarios that need a fresh or special target make
their own through it (pool.fresh). MUR_FAULTS_SOAK=1 runs more seeds (MUR_FAULTS_SEEDS=N exactly N),
MUR_FAULTS_LANES how many targets work at once, MUR_FAULTS_SEED shifts every seed.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from fault_harness import LanePool  # noqa: E402


@pytest.fixture(scope="session")
def fault_manifest(hello_capsule, runtime_bundle):
    """examples/hello (built) with this checkout's runtime bundle ready: every release gets its own
    greeting (--env HELLO_GREETING), so the answer of a task says which release serves."""
    return hello_capsule / "murmur.yaml"


@pytest.fixture(scope="session")
def pool(sshd_vm_image, fault_manifest, tmp_path_factory):
    lanes = LanePool(sshd_vm_image, fault_manifest, tmp_path_factory.mktemp("faults"))
    yield lanes
    failures = lanes.close()
    if failures:
        raise AssertionError("\n\n".join(failures))
