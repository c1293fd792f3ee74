"""Fixtures for the provisioning tests: the deploy tests' runtime bundle, clean HOMEs and shell
capsule (integration/deploy/conftest.py, loaded here under another name), and mur's VM images."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for d in (HERE.parent / "deploy", HERE.parent / "vm"):
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))

_spec = importlib.util.spec_from_file_location("deploy_conftest", HERE.parent / "deploy" / "conftest.py")
_deploy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_deploy)
bundle_cache, runtime_bundle, home, shell_capsule = (_deploy.bundle_cache, _deploy.runtime_bundle, _deploy.home,
                                                     _deploy.shell_capsule)
docker_client, base_image, sshd_vm_image, sshd_vm = (_deploy.docker_client, _deploy.base_image, _deploy.sshd_vm_image,
                                                     _deploy.sshd_vm)


@pytest.fixture(scope="session")
def vm_ready():
    """Skip unless this machine can build and boot mur's VMs (CI can)."""
    from mur.provision import image, qemu

    missing = qemu.missing() + image.missing_tools()
    if missing:
        pytest.skip(f"needs {' '.join(missing)}")
    if os.geteuid() != 0:
        pytest.skip("building VM images needs root (debootstrap)")
    return True
