"""Configuration files: `~/.murmur/config.yaml` (global) and `<cwd>/.murmur/config.yaml` (project).

Merged as upstream documents (reference/upstream.md section 5.5):
  * scalar `registry.*` and `inference.*` keys: project wins when set and non-empty;
  * `inference.api_key` is read from the global file only (a literal in a project file, which is
    likely to be committed, is ignored with a warning);
  * `registry.sources`: union by name, a project entry replacing a global one of the same name;
  * `beta.enabled`: union;
  * `containment`: strongest wins (advisory < scoped < sealed), never project-wins.
mur adds `deploy.release_source` (where pinned runtimes are fetched from), merged like a scalar.
When there is no global file, the base is upstream's built-in default (`registry.default: official`
and one GitHub source `murmur-nexus/default-artifacts`); once the global file exists it is the whole
base. A file that is not valid YAML, or a key of the wrong type, is E-CFG-003 naming the file;
unknown keys are ignored (they may belong to a newer mur).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur import paths
from mur.errors import MurError, warn
from mur.paths import MURMUR_DIR
from mur.manifest.capsule import CONTAINMENT_CLASSES
from mur.manifest.yamlio import parse_yaml

CLASS_RANK = {name: rank for rank, name in enumerate(CONTAINMENT_CLASSES)}


@dataclass
class MurConfig:
    """The merged view of the global and project config files."""

    registry_default: str | None = None
    registry_index_url: str | None = None
    registry_remote_url: str | None = None
    registry_sources: list[dict[str, Any]] = field(default_factory=list)
    inference: dict[str, str] = field(default_factory=dict)
    beta_enabled: list[str] = field(default_factory=list)
    containment: str | None = None
    containment_file: Path | None = None
    release_source: str | None = None
    files: list[Path] = field(default_factory=list)


def global_config_path(home: Path | None = None) -> Path:
    """~/.murmur/config.yaml; E-IO-001 when there is no home directory to find it in."""
    if home is not None:
        return home / MURMUR_DIR / "config.yaml"
    try:
        return paths.global_config_path()
    except MurError as exc:
        raise MurError(
            "E-IO-001",
            "cannot locate ~/.murmur/config.yaml: HOME is not set and this user has no home directory",
            "set HOME to a directory and rerun",
        ) from exc


def _current_dir() -> Path | None:
    """The working directory, or None when it has been removed under us."""
    try:
        return Path.cwd()
    except FileNotFoundError:
        return None


def project_config_path(cwd: Path | None = None) -> Path:
    """<cwd>/.murmur/config.yaml (upstream reads the cwd only, no parent walk)."""
    base = cwd or _current_dir()
    if base is None:
        raise MurError("E-IO-001", "the current directory no longer exists", "cd into an existing directory and rerun")
    return base / MURMUR_DIR / "config.yaml"


def _bad(path: Path, message: str) -> MurError:
    return MurError("E-CFG-003", f"{path}: {message}", f"fix or remove {path}")


def read_config_file(path: Path) -> dict[str, Any] | None:
    """One config file as a mapping: None when absent, {} when empty; E-CFG-003 / E-IO-* otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise _bad(path, "is a directory, expected a YAML file") from None
    except UnicodeDecodeError as exc:
        raise _bad(path, f"not valid UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except PermissionError as exc:
        raise MurError("E-IO-002", f"permission denied reading {path}") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read {path}: {exc.strerror or exc}") from exc
    data = parse_yaml(text, str(path), "E-CFG-003")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _bad(path, "expected a mapping at the top level")
    return data


def _section(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(path, f"'{key}' must be a mapping")
    return value


def _scalar(section: dict[str, Any], key: str, path: Path, where: str) -> str | None:
    value = section.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _bad(path, f"'{where}.{key}' must be a string")
    return value


def _containment(data: dict[str, Any], path: Path) -> str | None:
    value = data.get("containment")
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str) or value.strip() not in CLASS_RANK:
        raise _bad(path, f"containment must be one of: advisory, scoped, sealed; got '{value}'")
    return value.strip()


BUILTIN_DEFAULT: dict[str, Any] = {
    "registry": {
        "default": "official",
        "sources": [{"name": "official", "type": "github", "repo": "murmur-nexus/default-artifacts"}],
    }
}


def load_config(cwd: Path | None = None, home: Path | None = None,
                pending: tuple[Path, dict[str, Any] | None] | None = None) -> MurConfig:
    """Read and merge the global and project config files (either may be absent).

    `pending` = (path, contents): merge as if that file held `contents` (None: absent), so a
    change can be validated before it is written."""
    cfg = MurConfig()
    base = cwd or _current_dir()
    # A removed working directory holds no project file; the global one still applies.
    gpath, ppath = global_config_path(home), (project_config_path(base) if base is not None else None)
    layers = []
    for path, scope in ((gpath, "global"), (ppath, "project")):
        if path is None or (ppath == gpath and scope == "project"):
            continue
        data = pending[1] if pending is not None and pending[0] == path else read_config_file(path)
        if data is None and scope == "global":
            layers.append((Path("<built-in default>"), "builtin", BUILTIN_DEFAULT))
        elif data is not None:
            layers.append((path, scope, data))
            cfg.files.append(path)
    sources: dict[str, dict[str, Any]] = {}
    for path, scope, data in layers:
        registry = _section(data, "registry", path)
        for key, attr in (("default", "registry_default"), ("index_url", "registry_index_url"), ("remote_url", "registry_remote_url")):
            value = _scalar(registry, key, path, "registry")
            if value is not None:
                setattr(cfg, attr, value)
        raw_sources = registry.get("sources") or []
        if not isinstance(raw_sources, list):
            raise _bad(path, "'registry.sources' must be a list")
        for entry in raw_sources:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise _bad(path, "each registry.sources entry must be a mapping with a name")
            sources[entry["name"]] = dict(entry)
        inference = _section(data, "inference", path)
        for key in ("provider", "model", "api_key", "endpoint"):
            value = _scalar(inference, key, path, "inference")
            if value is None:
                continue
            if key == "api_key" and scope == "project":
                warn("W-CFG-001", f"{path}: inference.api_key is read from ~/.murmur/config.yaml only; ignored here")
                continue
            cfg.inference[key] = value
        beta = _section(data, "beta", path)
        enabled = beta.get("enabled") or []
        if not isinstance(enabled, list) or not all(isinstance(x, str) for x in enabled):
            raise _bad(path, "'beta.enabled' must be a list of strings")
        cfg.beta_enabled.extend(x for x in enabled if x not in cfg.beta_enabled)
        value = _containment(data, path)
        if value is not None and (cfg.containment is None or CLASS_RANK[value] > CLASS_RANK[cfg.containment]):
            cfg.containment, cfg.containment_file = value, path
        deploy = _section(data, "deploy", path)
        release = _scalar(deploy, "release_source", path, "deploy")
        if release is not None:
            cfg.release_source = release
    cfg.registry_sources = list(sources.values())
    return cfg
