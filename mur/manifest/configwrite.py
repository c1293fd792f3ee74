"""`mur config set | get | unset`: read or change one key of the global or project config file.

Every key the config reader documents (docs/manifest.md "Config files") can be set: upstream's six
(reference/upstream.md section 5.5) plus `registry.remote_url`, `containment` and mur's
`deploy.release_source`. A value is checked before anything is written: its own form (a class
name, a URL, a provider), then the merged view the change would produce (every file still loads;
`registry.default` names a configured source). Lists (`registry.sources`, `beta.enabled`) are edited
in the file. The file is rewritten atomically under a lock, so a crash leaves the old file or the
new one. PyYAML does not keep comments: a file edited this way loses them (said in docs/manifest.md).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

import yaml

from mur.errors import MurError
from mur.fsutil import atomic_write_text, locked
from mur.manifest.capsule import CONTAINMENT_CLASSES
from mur.manifest.config import MurConfig, global_config_path, load_config, project_config_path, read_config_file

PROVIDERS = ("anthropic", "openai")
SECRET = "inference.api_key"


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"must be one of: {', '.join(choices)}")
        return value

    return check


def _url(value: str, *, plain_http_loopback_only: bool = False) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if plain_http_loopback_only and parsed.scheme == "http" and not _loopback(parsed.hostname):
        raise ValueError("plain http:// is accepted for a loopback host only; use https://")
    return value


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_or_path(value: str, *, plain_http_loopback_only: bool = False) -> str:
    """A URL as given, or a local path made absolute (the file is read from wherever mur runs)."""
    if value.startswith(("http://", "https://")):
        return _url(value, plain_http_loopback_only=plain_http_loopback_only)
    if value.startswith("file://"):
        return value
    return os.path.abspath(os.path.expanduser(value))


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty (use `mur config unset` to remove it)")
    return value


@dataclass(frozen=True)
class Key:
    """One settable key: how a value is checked (and normalised), and what it is for."""

    check: Callable[[str], str]
    about: str


KEYS: dict[str, Key] = {
    "registry.default": Key(_text, "the name of a registry.sources entry"),
    "registry.index_url": Key(_url_or_path, "the artifacts-index.json `mur search --remote` reads (URL or path)"),
    "registry.remote_url": Key(_url, "a Nexus registry URL"),
    "inference.provider": Key(_one_of(PROVIDERS), "anthropic or openai"),
    "inference.model": Key(_text, "the default model name"),
    SECRET: Key(_text, "the provider API key (global file only; ${ENV_VAR} is resolved at run time)"),
    "inference.endpoint": Key(_url, "the provider's base URL"),
    "containment": Key(_one_of(CONTAINMENT_CLASSES), "a containment floor for every run: advisory, scoped or sealed"),
    "deploy.release_source": Key(lambda v: _url_or_path(v, plain_http_loopback_only=True),
                                 "where deploy fetches pinned runtimes: a directory or an https:// base URL"),
}


@dataclass(frozen=True)
class Setting:
    """A key's effective value and the file it comes from (None: not set anywhere)."""

    key: str
    value: str | None
    file: Path | None

    def to_json(self) -> dict[str, Any]:
        shown = "<set>" if self.key == SECRET and self.value is not None else self.value
        return {"key": self.key, "value": shown, "file": str(self.file) if self.file else None}


def _known(key: str) -> Key:
    if key not in KEYS:
        raise MurError("E-CFG-002", f"unsupported config key '{key}'", f"supported keys: {', '.join(KEYS)}")
    return KEYS[key]


def _file(global_: bool, cwd: Path | None, home: Path | None) -> Path:
    return global_config_path(home) if global_ else project_config_path(cwd)


def _split(key: str) -> tuple[str | None, str]:
    section, _, name = key.rpartition(".")
    return section or None, name


def _lookup(data: dict[str, Any] | None, key: str) -> Any:
    section, name = _split(key)
    holder = (data or {}).get(section) if section else data
    return holder.get(name) if isinstance(holder, dict) else None


def _with(data: dict[str, Any], key: str, value: str | None, path: Path) -> dict[str, Any]:
    """A copy of `data` with `key` set to `value` (None: removed, and an emptied section with it)."""
    out = dict(data)
    section, name = _split(key)
    if section is None:
        holder = out
    else:
        current = out.get(section)
        if current is not None and not isinstance(current, dict):
            raise MurError("E-CFG-003", f"{path}: '{section}' must be a mapping", f"fix or remove {path}")
        holder = out[section] = dict(current or {})
    if value is None:
        holder.pop(name, None)
        if section is not None and not holder:
            del out[section]
    else:
        holder[name] = value
    return out


def set_key(key: str, value: str, global_: bool, cwd: Path | None = None, home: Path | None = None) -> Path:
    """Write `key: value` into the chosen config file; returns the file written. Nothing is written
    unless the value and the merged view it produces are valid."""
    spec = _known(key)
    # inference.api_key is only ever read from the global file; writing it to a project file
    # (likely committed) would both leak it and have no effect.
    if key == SECRET and not global_:
        raise MurError("E-CFG-002", "inference.api_key is read from ~/.murmur/config.yaml only",
                       "rerun with -g: mur config set -g inference.api_key VALUE (or use ${ENV_VAR})")
    try:
        value = spec.check(value)
    except ValueError as exc:
        shown = "<hidden>" if key == SECRET else value
        raise MurError("E-CFG-003", f"invalid value '{shown}' for {key}: {exc}",
                       f"{key} is {spec.about}") from None
    path = _file(global_, cwd, home)
    with locked(path.parent / ".config.lock"):
        data = _with(read_config_file(path) or {}, key, value, path)
        merged = load_config(cwd, home, pending=(path, data))
        if key == "registry.default":
            _check_default(value, merged)
        _write(path, data, private=key == SECRET)
    return path


def unset_key(key: str, global_: bool, cwd: Path | None = None, home: Path | None = None) -> tuple[Path, bool]:
    """Remove `key` from the chosen config file; (file, whether it was there)."""
    _known(key)
    path = _file(global_, cwd, home)
    with locked(path.parent / ".config.lock"):
        data = read_config_file(path)
        if _lookup(data, key) is None:
            return path, False
        changed = _with(data or {}, key, None, path)
        load_config(cwd, home, pending=(path, changed))
        _write(path, changed, private=False)
    return path, True


def get_key(key: str, global_: bool = False, cwd: Path | None = None, home: Path | None = None) -> Setting:
    """The effective value of `key` (merged, as mur run reads it), or the global file's with -g."""
    _known(key)
    if global_:
        path = global_config_path(home)
        value = _lookup(read_config_file(path), key)
        return Setting(key, value if isinstance(value, str) and value else None, path if value else None)
    cfg = load_config(cwd, home)
    value = _merged_value(cfg, key)
    if value is None:
        return Setting(key, None, None)
    # The file it comes from: the last layer that sets it (project wins), the strongest for containment.
    if key == "containment":
        return Setting(key, value, cfg.containment_file)
    for path in reversed(cfg.files):
        if _lookup(read_config_file(path), key) == value:
            return Setting(key, value, path)
    return Setting(key, value, None)  # the built-in default


def _merged_value(cfg: MurConfig, key: str) -> str | None:
    section, name = _split(key)
    if section == "registry":
        return getattr(cfg, f"registry_{name}")
    if section == "inference":
        return cfg.inference.get(name)
    if section == "deploy":
        return cfg.release_source
    return cfg.containment


def _check_default(value: str, merged: MurConfig) -> None:
    names = [s["name"] for s in merged.registry_sources]
    if value not in names:
        raise MurError(
            "E-CFG-003",
            f"invalid value '{value}' for registry.default: no registry source has that name "
            f"(configured: {', '.join(names) or 'none'})",
            "add it under registry.sources in the config file first, or name one of those",
        )


def _write(path: Path, data: dict[str, Any], *, private: bool) -> None:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    # Keep a file that was private private (it may hold the api_key).
    private = private or (path.exists() and path.stat().st_mode & 0o077 == 0)
    atomic_write_text(path, text, 0o600 if private else 0o644)
