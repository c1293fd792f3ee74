"""`mur config set`: change one key of the global or project config file.

Upstream accepts exactly six keys (reference/upstream.md section 5.5); anything else is E-CFG-002.
The file is rewritten atomically under a lock, so a crash leaves the old file or the new one.
PyYAML does not keep comments: a file edited this way loses them (said in docs/manifest.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mur.errors import MurError
from mur.fsutil import atomic_write_text, locked
from mur.manifest.config import global_config_path, load_config, project_config_path, read_config_file

SETTABLE = (
    "registry.default",
    "registry.index_url",
    "inference.provider",
    "inference.model",
    "inference.api_key",
    "inference.endpoint",
)
PROVIDERS = ("anthropic", "openai")


def set_key(key: str, value: str, global_: bool, cwd: Path | None = None, home: Path | None = None) -> Path:
    """Write `key: value` into the chosen config file; returns the file written."""
    if key not in SETTABLE:
        raise MurError("E-CFG-002", f"unsupported config key '{key}'", f"supported keys: {', '.join(SETTABLE)}")
    if key == "inference.provider" and value not in PROVIDERS:
        raise MurError("E-CFG-003", f"inference.provider must be one of: {', '.join(PROVIDERS)}; got '{value}'",
                       "mur config set inference.provider anthropic")
    # inference.api_key is only ever read from the global file; writing it to a project file
    # (likely committed) would both leak it and have no effect.
    if key == "inference.api_key" and not global_:
        raise MurError("E-CFG-002", "inference.api_key is read from ~/.murmur/config.yaml only",
                       "rerun with -g: mur config set -g inference.api_key VALUE (or use ${ENV_VAR})")
    path = global_config_path(home) if global_ else project_config_path(cwd)
    with locked(path.parent / ".config.lock"):
        data: dict[str, Any] = read_config_file(path) or {}
        section, name = key.split(".", 1)
        current = data.setdefault(section, {})
        if current is None:
            current = data[section] = {}
        if not isinstance(current, dict):
            raise MurError("E-CFG-003", f"{path}: '{section}' must be a mapping", f"fix or remove {path}")
        current[name] = value
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
        private = key == "inference.api_key" or (path.exists() and path.stat().st_mode & 0o077 == 0)
        atomic_write_text(path, text, 0o600 if private else 0o644)
    load_config(cwd, home)  # the merged view must still load
    return path
