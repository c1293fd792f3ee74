"""Providers: one per kind of target, behind one protocol (providers/base.py).

`provider_for` is the one place that maps a target kind to its implementation.
"""

from __future__ import annotations

from mur.deploy.providers.base import Provider
from mur.errors import MurError

KINDS = ("local", "ssh", "docker")


def provider_for(kind: str) -> Provider:
    if kind in ("local", "ssh"):
        from mur.deploy.providers.hostops import HostProvider

        return HostProvider(kind)
    if kind == "docker":
        from mur.deploy.providers.dockerops import DockerProvider

        return DockerProvider()
    raise MurError("E-DEPLOY-001", f"unknown provider '{kind}'", f"one of: {', '.join(KINDS)}")
