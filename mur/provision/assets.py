"""deploy/'s files, the one source of the host preparation: found in the package (an installed mur
carries them as package data under mur/provision/deploy) or, in a checkout, through the
mur/provision/deploy symlink to the top-level deploy/ folder."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from mur.deploy.targets.base import HELPER
from mur.errors import MurError

ROOT = Path(__file__).resolve().parent / "deploy"


@dataclass(frozen=True)
class HostFile:
    """A deploy/ file installed on a prepared host."""

    asset: str  # path under deploy/
    dest: str  # where it goes on the host
    mode: int

    def data(self) -> bytes:
        return read_bytes(self.asset)

    def sha256(self) -> str:
        return hashlib.sha256(self.data()).hexdigest()


# Where prepare (and the user-data template, which lists the same paths) installs each file.
SUDOERS = HostFile("sudoers/mur-deploy", "/etc/sudoers.d/mur-deploy", 0o440)
HOST_FILES: tuple[HostFile, ...] = (
    SUDOERS,
    HostFile("systemd/mur-delegate.conf", "/etc/systemd/system/user@.service.d/mur-delegate.conf", 0o644),
    HostFile("systemd/mur-delegate.conf", "/etc/systemd/system/mur-.service.d/mur-delegate.conf", 0o644),
    HostFile("host/mur-host.sh", "/usr/local/lib/mur/mur-host.sh", 0o755),
    HostFile("host/mur-cmdline.cfg", "/usr/local/lib/mur/mur-cmdline.cfg", 0o644),
    HostFile("host/mur-deploy-helper", HELPER, 0o755),
)
HOST_SCRIPT = "/usr/local/lib/mur/mur-host.sh"
MARKER = "/etc/mur/host.json"
GROUP = "mur-deploy"


def path(name: str) -> Path:
    """The file deploy/<name>; E-IO-001 when this mur was installed without its data."""
    p = ROOT / name
    if not p.is_file():
        raise MurError("E-IO-001", f"mur's host preparation file {name} is missing ({p})",
                       "reinstall mur: its package data (mur/provision/deploy) is incomplete")
    return p


def read_text(name: str) -> str:
    return path(name).read_text(encoding="utf-8")


def read_bytes(name: str) -> bytes:
    return path(name).read_bytes()
