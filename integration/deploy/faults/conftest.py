"""Fixtures of the deploy fault suite (integration/deploy/faults): fault_harness.py says how the
scenarios run, fault_target.py / fault_checks.py hold the pieces, STATUS.md what passes against
the latest product branch.

`faults` is the session's scheduler: at the first scenario test it starts working through the
seeds of every collected scenario on a few targets at once; each test waits for its own. At the
end of the session every target still serving is destroyed and checked for leftovers.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import fault_harness  # noqa: E402
from fault_harness import LanePool, Scheduler  # noqa: E402


def pytest_collection_finish(session):
    fault_harness.SELECTED[:] = [name for item in session.items
                                 if (name := getattr(getattr(item, "function", None), "fault_scenario", None))]


@pytest.fixture(scope="session")
def fault_manifest(hello_capsule, runtime_bundle):
    """examples/hello (built) with this checkout's runtime bundle ready: every release gets its own
    greeting (--env HELLO_GREETING), so the answer of a task says which release serves."""
    return hello_capsule / "murmur.yaml"


@pytest.fixture(scope="session")
def faults(sshd_vm_image, fault_manifest, tmp_path_factory):
    pool = LanePool(sshd_vm_image, fault_manifest, tmp_path_factory.mktemp("faults"))
    scheduler = Scheduler(pool, list(fault_harness.SELECTED))
    try:
        yield scheduler
    finally:
        scheduler.stop()
        failures = pool.close()
    if failures:
        raise AssertionError("\n\n".join(failures))
