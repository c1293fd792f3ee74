"""Where mur keeps its files on this machine: the one owner of `~/.murmur` and the caches.

Every module that needs a path under the user's home asks here, so `HOME` (which tests and
deploy targets set) is honoured the same way everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from mur.errors import MurError

MURMUR_DIR = ".murmur"
MANIFEST_FILENAME = "murmur.yaml"


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """$HOME (or $USERPROFILE, or the passwd entry) as an absolute path; E-IO-001 when none is known.
    `env`: another process's environment (the capsule host asks for its clients'), else ours."""
    env = os.environ if env is None else env
    raw = env.get("HOME") or env.get("USERPROFILE")
    if not raw:
        try:
            raw = str(Path.home())
        except (RuntimeError, KeyError):  # HOME unset and the uid has no passwd entry
            raw = ""
    if not raw:
        raise MurError("E-IO-001", "could not determine home directory", "set HOME to your home directory")
    path = Path(raw)
    return path if path.is_absolute() else Path.cwd() / path


def manifest_path(path: str | Path) -> Path:
    """`path`, or `path/murmur.yaml` when `path` is a directory: `-m DIR` means the capsule in DIR for
    every command that takes a manifest (as `mur build DIR` does)."""
    path = Path(path)
    return path / MANIFEST_FILENAME if path.is_dir() else path


def murmur_home(env: Mapping[str, str] | None = None) -> Path:
    """`~/.murmur` of the user running mur."""
    return home_dir(env) / MURMUR_DIR


def project_murmur_dir(project_dir: Path) -> Path:
    """`<project_dir>/.murmur` (project-level store and config)."""
    return Path(project_dir) / MURMUR_DIR


def global_config_path() -> Path:
    """`~/.murmur/config.yaml`."""
    return murmur_home() / "config.yaml"


def sessions_dir() -> Path:
    """`~/.murmur/sessions`: session directories of --workdir runs whose manifest is inside the workdir."""
    return murmur_home() / "sessions"


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """`$MUR_CACHE_DIR`, else `~/.murmur/cache`: compiled components, built guests, precompiled payloads."""
    given = (os.environ if env is None else env).get("MUR_CACHE_DIR")
    return Path(given) if given else murmur_home(env) / "cache"


def bin_dir() -> Path:
    """`~/.murmur/bin`: pinned runtime bundles fetched or built for deploys."""
    return murmur_home() / "bin"


def deployments_path() -> Path:
    """`~/.murmur/deployments.json`: the deployment records."""
    return murmur_home() / "deployments.json"


def registry_data_dir() -> Path:
    """`$NEXUS_DATA`, else `~/.murmur/registry`: storage of `mur registry serve`."""
    env = os.environ.get("NEXUS_DATA")
    return Path(env) if env else murmur_home() / "registry"


def known_hosts_path() -> Path:
    """`~/.ssh/known_hosts`: the host keys deploy verifies against."""
    return home_dir() / ".ssh" / "known_hosts"
