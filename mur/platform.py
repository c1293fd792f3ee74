"""The platform name (`linux-x86_64`, `darwin-aarch64`): one spelling for stores, bundles and targets."""

from __future__ import annotations

import platform as _platform

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def platform_tag(system: str, machine: str) -> str:
    """`uname -s` / `uname -m` (or Docker's OSType / Architecture) -> upstream's asset naming."""
    system = system.strip().lower()
    machine = machine.strip().lower()
    machine = _ARCH_ALIASES.get(machine, machine)
    return f"{system}-{machine}" if system and machine else "unknown"


def current_platform() -> str:
    """This host's platform tag."""
    return platform_tag(_platform.system(), _platform.machine())
