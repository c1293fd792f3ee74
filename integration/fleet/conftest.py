"""Fixtures for the fleet tests: the deploy tests' fixtures (integration/deploy/conftest.py, loaded here
under another name), three sshd "VMs" started at once, and fleet files written for them."""

from __future__ import annotations

import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for d in (HERE.parent / "deploy", HERE.parent.parent / "tests" / "fleet"):
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))

_spec = importlib.util.spec_from_file_location("deploy_conftest_for_fleet", HERE.parent / "deploy" / "conftest.py")
_deploy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_deploy)
docker_client, base_image, sshd_vm_image = _deploy.docker_client, _deploy.base_image, _deploy.sshd_vm_image
bundle_cache, runtime_bundle, home, hello_capsule = (_deploy.bundle_cache, _deploy.runtime_bundle, _deploy.home,
                                                     _deploy.hello_capsule)

from deploy_support import sshd_container  # noqa: E402


@pytest.fixture
def three_vms(sshd_vm_image, tmp_path):
    """Three sshd "VMs", started in parallel (each one's start waits for its sshd)."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        vms = list(pool.map(lambda i: sshd_container(sshd_vm_image, tmp_path / f"vm{i}"), range(1, 4)))
    yield vms
    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(lambda vm: vm.close(), vms))
