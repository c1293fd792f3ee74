"""`mur search`: find artifacts by name, description or tag in an index (upstream `commands/search.rs`).

Where it looks (``load_entries``), agreeing with `mur install`'s choice of registry::

    --registry local              the project store (in a project) and the global store (.meta.json)
    --registry http(s)://HOST     a Nexus registry's `GET /v1/artifacts` (bearer NEXUS_API_KEY)
    --registry PATH | file://...  a static artifacts-index.json (so is an http(s) URL ending in .json)
    --remote                      the static index at registry.index_url (config.yaml), else
                                  upstream's default on raw.githubusercontent.com
    no --registry                 the nearest murmur.yaml's registry.remote_url / registry.default,
                                  read exactly as install reads them; when it sets neither, the
                                  static index at registry.index_url when configured; otherwise the
                                  local stores only: offline first, nothing configured reaches out

The static index is upstream section 5.3: `{"schema_version": "1", "updated_at": ...,
"artifacts": [{name, version, runtime, description?, tags?, platforms?}]}`. Failures are E-IO-003
with upstream's wording (`failed to fetch|parse artifact index from <where>: ...`).

Matching is a case-insensitive substring over name, description and tags, ranked exact name > name
prefix > name substring > description or tag, then by name; a name's versions follow newest first,
in the order `mur install NAME` uses to pick the latest (semver-ish, strings as a fallback).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from mur.artifacts.operations import align_columns, find_project_root, version_key
from mur.artifacts.registry_client import (
    TIMEOUT_SECONDS,
    LocalRegistry,
    RemoteRegistry,
    registry_error,
    resolve_registry,
    workspace_registry_config,
)
from mur.artifacts.store import ArtifactMeta, Store, global_store, project_store
from mur.errors import MurError
from mur.manifest.yamlio import one_line

DEFAULT_INDEX_URL = (
    "https://raw.githubusercontent.com/murmur-nexus/default-artifacts/refs/heads/main/artifacts-index.json"
)
INDEX_SCHEMA_VERSION = "1"
DEFAULT_LIMIT = 10

RANK_EXACT, RANK_PREFIX, RANK_NAME, RANK_TEXT = range(4)

_INDEX_HINT = (
    "point registry.index_url (`mur config set registry.index_url <url|path>`) or --registry at a valid "
    "artifacts-index.json, or search installed artifacts with --registry local"
)


@dataclass(frozen=True)
class IndexEntry:
    """One artifact version as an index lists it (RUNTIME is the role: tool, skill, ...)."""

    name: str
    version: str
    runtime: str
    description: str | None = None
    tags: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "runtime": self.runtime,
            "description": self.description,
            "tags": list(self.tags),
            "platforms": list(self.platforms),
        }


def entry_from_meta(meta: ArtifactMeta) -> IndexEntry:
    """A store's or Nexus registry's metadata as an index entry (role, else packaging type)."""
    return IndexEntry(
        name=meta.name,
        version=meta.version,
        runtime=meta.artifact_runtime or meta.runtime,
        description=meta.description,
        tags=tuple(meta.tags),
        platforms=tuple(meta.platform_tags),
    )


# --- the static index -------------------------------------------------------------------------


def _parse_error(source: str, detail: str) -> MurError:
    return MurError("E-IO-003", f"failed to parse artifact index from {source}: {one_line(detail)}", _INDEX_HINT)


def _string_list(value: Any, where: str, source: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _parse_error(source, f"{where} must be a list of strings")
    return tuple(value)


def _platforms(value: Any, where: str, source: str) -> tuple[str, ...]:
    """`["linux-x86_64", ...]` (upstream's index) or `[["linux", "x86_64"], ...]` (the Nexus API's)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _parse_error(source, f"{where} must be a list")
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list) and len(item) == 2 and all(isinstance(p, str) for p in item):
            out.append(f"{item[0]}-{item[1]}")
        else:
            raise _parse_error(source, f"{where} entries must be 'os-arch' strings or [os, arch] pairs")
    return tuple(out)


def _index_entry(item: Any, where: str, source: str) -> IndexEntry:
    if not isinstance(item, dict):
        raise _parse_error(source, f"{where} must be an object")
    for key in ("name", "version", "runtime"):
        if key not in item or item[key] is None:
            raise _parse_error(source, f"{where}: missing field '{key}'")
        if not isinstance(item[key], str) or (key != "runtime" and not item[key].strip()):
            raise _parse_error(source, f"{where}.{key} must be a non-empty string")
    description = item.get("description")
    if description is not None and not isinstance(description, str):
        raise _parse_error(source, f"{where}.description must be a string")
    return IndexEntry(
        name=item["name"],
        version=item["version"],
        runtime=item["runtime"],
        description=description,
        tags=_string_list(item.get("tags"), f"{where}.tags", source),
        platforms=_platforms(item.get("platforms"), f"{where}.platforms", source),
    )


def parse_index(raw: bytes | str, source: str) -> list[IndexEntry]:
    """The entries of an artifacts-index.json document (E-IO-003 naming what is wrong)."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise _parse_error(source, f"not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise _parse_error(source, "expected a JSON object with 'schema_version' and 'artifacts'")
    schema = doc.get("schema_version")
    if schema is None:
        raise _parse_error(source, "missing field 'schema_version'")
    if not isinstance(schema, str):
        raise _parse_error(source, f"'schema_version' must be a string (\"{INDEX_SCHEMA_VERSION}\")")
    if schema != INDEX_SCHEMA_VERSION:
        raise MurError(
            "E-IO-003",
            f"unsupported artifact index schema version '{one_line(str(schema))}' from {source} (expected 1)",
            _INDEX_HINT,
        )
    artifacts = doc.get("artifacts")
    if artifacts is None:
        raise _parse_error(source, "missing field 'artifacts'")
    if not isinstance(artifacts, list):
        raise _parse_error(source, "'artifacts' must be a list")
    return [_index_entry(item, f"artifacts[{i}]", source) for i, item in enumerate(artifacts)]


def _is_http(text: str) -> bool:
    return text.lower().startswith(("http://", "https://"))


def _local_index_path(location: str, cwd: Path) -> Path:
    if location.lower().startswith("file://"):
        parsed = urlparse(location)
        if parsed.netloc not in ("", "localhost"):
            raise MurError(
                "E-IO-003", f"failed to read artifact index from {location}: not a local file URL", _INDEX_HINT
            )
        return Path(unquote(parsed.path))
    path = Path(location).expanduser()
    return path if path.is_absolute() else cwd / path


def fetch_index(url: str, *, transport: Any = None) -> list[IndexEntry]:
    """GET an artifacts-index.json over http(s) (no credentials: it is a public static file)."""
    import httpx

    try:
        with httpx.Client(
            transport=transport,
            timeout=httpx.Timeout(TIMEOUT_SECONDS),
            follow_redirects=True,
            headers={"user-agent": "mur"},
        ) as client:
            resp = client.get(url)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise MurError("E-IO-003", f"failed to fetch artifact index from {url}: {exc}", _INDEX_HINT) from exc
    if resp.status_code != 200:
        raise MurError(
            "E-IO-003",
            f"failed to fetch artifact index from {url}: HTTP {resp.status_code} {resp.reason_phrase}".rstrip(),
            _INDEX_HINT,
        )
    return parse_index(resp.content, url)


def read_index(location: str, *, cwd: Path | None = None, transport: Any = None) -> list[IndexEntry]:
    """The index at an http(s) URL, a file:// URL or a file path (relative to `cwd`)."""
    location = location.strip()
    if _is_http(location):
        return fetch_index(location, transport=transport)
    path = _local_index_path(location, Path(cwd or Path.cwd()))
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MurError(
            "E-IO-003", f"failed to read artifact index from {path}: {exc.strerror or exc}", _INDEX_HINT
        ) from exc
    return parse_index(raw, str(path))


# --- stores and registries --------------------------------------------------------------------


def local_entries(cwd: Path) -> list[IndexEntry]:
    """Every artifact in the project store (when in a project) and the global store."""
    roots = []
    try:
        roots.append(project_store(find_project_root(cwd)))
    except MurError:
        pass
    roots.append(global_store())
    return [entry_from_meta(meta) for root in roots for meta in Store(root).list_index()]


def _registry_entries(target: LocalRegistry | RemoteRegistry, cwd: Path) -> list[IndexEntry]:
    if isinstance(target, LocalRegistry):
        return local_entries(cwd)
    import httpx

    try:
        metas = target.list_index()
    except httpx.InvalidURL as exc:
        raise registry_error(f"failed to list artifacts from {target.url}: {exc}") from exc
    return [entry_from_meta(meta) for meta in metas]


def _is_index_location(registry: str) -> bool:
    """A file, a file:// URL, or an http(s) URL naming a .json file (not a Nexus base URL)."""
    if not _is_http(registry):
        return True
    return urlparse(registry).path.lower().endswith(".json")


def searches_local_only(registry: str | None = None, *, remote: bool = False, cwd: Path | None = None) -> bool:
    """Whether `mur search` with these options reads the local stores and nothing else."""
    if remote:
        return False
    if registry is not None:
        return registry.strip().lower() == "local"
    cwd = Path(cwd or Path.cwd())
    workspace = workspace_registry_config(cwd)
    if (workspace.get("remote_url") or "").strip():
        return False
    if workspace.get("default") is not None:
        return workspace["default"] == "local"
    from mur.manifest.config import load_config

    return load_config(cwd=cwd).registry_index_url is None


def load_entries(
    registry: str | None = None, *, remote: bool = False, cwd: Path | None = None, transport: Any = None,
    env: dict | None = None,
) -> list[IndexEntry]:
    """Every entry of the index `mur search` reads (see the module docstring for the order)."""
    cwd = Path(cwd or Path.cwd())
    if registry is not None:
        text = registry.strip()
        if text.lower() == "local":
            return local_entries(cwd)
        if _is_index_location(text):
            return read_index(text, cwd=cwd, transport=transport)
        return _registry_entries(resolve_registry(text, cwd=cwd, transport=transport, env=env), cwd)
    from mur.manifest.config import load_config

    if remote:
        return read_index(load_config(cwd=cwd).registry_index_url or DEFAULT_INDEX_URL, cwd=cwd, transport=transport)
    workspace = workspace_registry_config(cwd)
    if (workspace.get("remote_url") or "").strip() or workspace.get("default") is not None:
        return _registry_entries(resolve_registry(None, cwd=cwd, transport=transport, env=env), cwd)
    location = load_config(cwd=cwd).registry_index_url
    if location is not None:
        return read_index(location, cwd=cwd, transport=transport)
    return local_entries(cwd)


# --- matching and ranking ---------------------------------------------------------------------


def match_rank(entry: IndexEntry, query: str) -> int | None:
    """How well `entry` matches `query` (lower is better; None: no match)."""
    needle = query.strip().casefold()
    name = entry.name.casefold()
    if name == needle:
        return RANK_EXACT
    if name.startswith(needle):
        return RANK_PREFIX
    if needle in name:
        return RANK_NAME
    texts = [entry.description or "", *entry.tags]
    if any(needle in text.casefold() for text in texts):
        return RANK_TEXT
    return None


def rank_entries(entries: list[IndexEntry], query: str) -> list[IndexEntry]:
    """Matching entries, one per name@version, best match first and each name's newest version first.

    Every matching version of a name has the same rank (name ranks depend on the name only; a name
    that does not match is RANK_TEXT), so a name's versions stay together.
    """
    seen: set[tuple[str, str]] = set()
    ranked: list[tuple[int, IndexEntry]] = []
    for entry in entries:
        key = (entry.name, entry.version)
        rank = match_rank(entry, query)
        if rank is None or key in seen:
            continue
        seen.add(key)
        ranked.append((rank, entry))
    ranked.sort(key=lambda item: (version_key(item[1].version), item[1].version), reverse=True)
    ranked.sort(key=lambda item: (item[0], item[1].name.casefold(), item[1].name))
    return [entry for _, entry in ranked]


def search(
    query: str,
    *,
    registry: str | None = None,
    remote: bool = False,
    limit: int = DEFAULT_LIMIT,
    cwd: Path | None = None,
    transport: Any = None,
    env: dict | None = None,
) -> list[IndexEntry]:
    """`mur search QUERY`: at most `limit` ranked matches."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    entries = load_entries(registry, remote=remote, cwd=cwd, transport=transport, env=env)
    return rank_entries(entries, query)[:limit]


# --- output -----------------------------------------------------------------------------------


def _cell(text: str | None) -> str:
    return one_line(" ".join(text.split())) if text and text.strip() else "\u2014"


def render_table(hits: list[IndexEntry]) -> str:
    """`NAME  VERSION  RUNTIME  DESCRIPTION` (`—` for a missing description), as `mur list` aligns."""
    headers = ["NAME", "VERSION", "RUNTIME", "DESCRIPTION"]
    table = [[_cell(h.name), _cell(h.version), _cell(h.runtime), _cell(h.description)] for h in hits]
    return align_columns(headers, table)


def hits_json(hits: list[IndexEntry]) -> list[dict[str, Any]]:
    return [hit.to_json() for hit in hits]
