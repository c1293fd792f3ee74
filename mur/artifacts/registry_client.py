"""Registries `mur publish` / `mur install` talk to: the local one and a remote Nexus.

* ``LocalRegistry`` is the global store (`~/.murmur/artifacts`), as upstream's local mode.
* ``RemoteRegistry`` speaks the Nexus HTTP API (upstream section 5.3) with httpx: bearer
  `NEXUS_API_KEY`, 30 s timeouts, and a digest check of every download against the mandatory
  `x-murmur-sha256` header (E-REG-002, nothing returned, so nothing is written). The transport is
  injectable (`httpx.MockTransport` or a real loopback server in tests).

Selection (``resolve_registry``): `--registry <url|local>` > `registry.remote_url` in the nearest
murmur.yaml > `registry.default: remote` (http://localhost:7800) > local. Remote mode needs
NEXUS_API_KEY. Errors read as upstream renders them (`registry error: ...` is E-IO-003).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from mur.artifacts.progress import Transfer, silent
from mur.artifacts.store import (
    ArtifactMeta,
    Store,
    conflict_error,
    global_store,
    integrity_error,
    sha256_hex,
    split_platform,
)
from mur.errors import MurError

DEFAULT_REMOTE_REGISTRY = "http://localhost:7800"
TIMEOUT_SECONDS = 30.0
RESERVED_VERSIONS = ("latest", "stable", "edge")
_CHUNK = 256 * 1024


@dataclass(frozen=True)
class PublishResult:
    artifact_id: str
    sha256: str


@dataclass(frozen=True)
class Fetched:
    """Verified artifact bytes from a registry."""

    name: str
    version: str
    data: bytes
    sha256: str
    meta: ArtifactMeta


def registry_error(message: str, hint: str | None = None) -> MurError:
    return MurError("E-IO-003", f"registry error: {message}", hint)


def not_found_error(name: str, version: str) -> MurError:
    return MurError(
        "E-REG-001",
        f"artifact {name}@{version} not found in registry",
        "run `mur publish` first, or check --registry / registry.remote_url in murmur.yaml",
    )


def reserved_error(version: str) -> MurError:
    return MurError(
        "E-REG-004",
        f"version '{version}' is reserved and cannot be published",
        "reserved strings: latest, stable, edge \u2014 use an explicit semver version",
    )


def is_reserved_version(version: str) -> bool:
    return version.lower() in RESERVED_VERSIONS


def transit_integrity_error(name: str, version: str) -> MurError:
    return integrity_error(
        name,
        version,
        "the bytes received do not match the registry's x-murmur-sha256; nothing was installed \u2014 "
        f"retry `mur install {name}@{version}`, and check for a proxy altering downloads",
    )


def _fetched_meta(name: str, version: str, data: bytes, platform: str | None) -> ArtifactMeta:
    from mur.artifacts.package import ArchiveError, read_manifest_bytes

    try:
        manifest, _ = read_manifest_bytes(data)
        runtime, role = manifest.registry_runtime, manifest.runtime
    except ArchiveError:
        runtime, role = "wasm", ""
    pair = split_platform(platform) if platform else None
    platforms = [pair] if (pair and runtime == "native") else []
    return ArtifactMeta(name=name, version=version, runtime=runtime, artifact_runtime=role, platforms=platforms)


class LocalRegistry:
    """Local mode: the global store is the registry."""

    url = "local"

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else global_store()
        self.store = Store(self.root)

    def publish(self, meta: ArtifactMeta, data: bytes) -> PublishResult:
        if is_reserved_version(meta.version):
            raise reserved_error(meta.version)
        digest = sha256_hex(data)
        self.store.put(meta, digest, data=data, overwrite=False)
        return PublishResult(f"{meta.name}@{meta.version}", digest)

    def fetch(self, name: str, version: str, platform: str | None = None) -> Fetched:
        stored = self.store.lookup(name, version, platform)
        if stored is None:
            raise not_found_error(name, version)
        data = stored.read_verified()
        return Fetched(name, version, data, stored.sha256, stored.meta)

    def list_index(self) -> list[ArtifactMeta]:
        return self.store.list_index()


class RemoteRegistry:
    """A Nexus registry over HTTP."""

    def __init__(self, base_url: str, api_key: str, *, transport: Any = None, timeout: float = TIMEOUT_SECONDS,
                 progress: Transfer | None = None):
        self.url = base_url.strip().rstrip("/")
        self._api_key = api_key
        self._transport = transport
        self._timeout = timeout
        self._progress = progress or silent

    def _client(self):
        import httpx

        return httpx.Client(
            transport=self._transport,
            timeout=httpx.Timeout(self._timeout),
            follow_redirects=True,
            headers={"authorization": f"Bearer {self._api_key}", "user-agent": "mur"},
        )

    def _auth_error(self) -> MurError:
        return registry_error(
            f"registry authentication failed for {self.url}. Check NEXUS_API_KEY and try again.",
            "export NEXUS_API_KEY with the key `mur registry serve` was started with",
        )

    # -- publish --------------------------------------------------------------------------------

    def publish(self, meta: ArtifactMeta, data: bytes) -> PublishResult:
        import httpx

        params = [("name", meta.name), ("version", meta.version), ("runtime", meta.runtime)]
        params += [("platform", tag) for tag in meta.platform_tags]
        label = f"{meta.name}@{meta.version}"
        try:
            with self._client() as client, self._progress(f"\u2191 {label}", len(data)) as advance:

                def body() -> Iterator[bytes]:
                    for start in range(0, len(data), _CHUNK):
                        chunk = data[start : start + _CHUNK]
                        advance(len(chunk))
                        yield chunk

                resp = client.post(
                    f"{self.url}/v1/artifacts",
                    params=params,
                    content=body(),
                    headers={"content-type": "application/octet-stream", "content-length": str(len(data))},
                )
        except httpx.HTTPError as exc:
            raise registry_error(f"failed to publish {label} via registry {self.url}: {exc}") from exc
        status = resp.status_code
        if status == 201:
            try:
                body_json = resp.json()
                return PublishResult(str(body_json["artifact_id"]), str(body_json["sha256"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise registry_error(f"invalid publish response from {self.url}: {exc}") from exc
        if status == 409:
            raise conflict_error(meta.name, meta.version, remote=True)
        if status == 422:
            message = _server_error(resp) or "artifact rejected by registry"
            prefix, suffix = "reserved artifact version '", "' is not allowed"
            if message.startswith(prefix) and message.endswith(suffix):
                raise reserved_error(message[len(prefix) : -len(suffix)])
            raise registry_error(message)
        if status in (401, 403):
            raise self._auth_error()
        raise registry_error(
            f"publish failed with HTTP {status} {resp.reason_phrase}: "
            f"{_server_error(resp) or 'unknown registry error'}"
        )

    # -- fetch ----------------------------------------------------------------------------------

    def fetch(self, name: str, version: str, platform: str | None = None) -> Fetched:
        import httpx

        url = f"{self.url}/v1/artifacts/{quote(name, safe='')}/{quote(version, safe='')}"
        params = {"platform": platform} if platform else None
        try:
            with self._client() as client, client.stream("GET", url, params=params) as resp:
                status = resp.status_code
                if status == 200:
                    expected = (resp.headers.get("x-murmur-sha256") or "").strip().lower()
                    if not expected:
                        raise registry_error("registry response missing x-murmur-sha256 header")
                    total = int(resp.headers.get("content-length") or 0) or None
                    digest = hashlib.sha256()
                    buf = bytearray()
                    with self._progress(f"\u2193 {name}@{version}", total) as advance:
                        for chunk in resp.iter_bytes():
                            digest.update(chunk)
                            buf += chunk
                            advance(len(chunk))
                    if digest.hexdigest() != expected:
                        raise transit_integrity_error(name, version)
                    data = bytes(buf)
                    return Fetched(name, version, data, expected, _fetched_meta(name, version, data, platform))
                resp.read()
        except httpx.HTTPError as exc:
            raise registry_error(f"failed to download {name}@{version} from {self.url}: {exc}") from exc
        if status == 404:
            raise not_found_error(name, version)
        if status in (401, 403):
            raise self._auth_error()
        raise registry_error(
            f"download failed with HTTP {status} {resp.reason_phrase}: "
            f"{_server_error(resp) or 'unknown registry error'}"
        )

    # -- index ----------------------------------------------------------------------------------

    def list_index(self) -> list[ArtifactMeta]:
        import httpx

        try:
            with self._client() as client:
                resp = client.get(f"{self.url}/v1/artifacts")
        except httpx.HTTPError as exc:
            raise registry_error(f"failed to list artifacts from {self.url}: {exc}") from exc
        if resp.status_code in (401, 403):
            raise self._auth_error()
        if resp.status_code != 200:
            raise registry_error(
                f"list failed with HTTP {resp.status_code} {resp.reason_phrase}: "
                f"{_server_error(resp) or 'unknown registry error'}"
            )
        try:
            raw = resp.json()
            if not isinstance(raw, list):
                raise ValueError("expected a JSON array")
            return [ArtifactMeta.from_dict(item) for item in raw]
        except ValueError as exc:
            raise registry_error(f"invalid index response from {self.url}: {exc}") from exc


def _server_error(resp: Any) -> str | None:
    text = resp.text
    if not text.strip():
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    return text


# --- selection --------------------------------------------------------------------------------


def find_manifest_dir(start: Path) -> Path | None:
    """Nearest directory at or above `start` holding a murmur.yaml."""
    current = Path(start).resolve()
    for candidate in (current, *current.parents):
        if (candidate / "murmur.yaml").is_file():
            return candidate
    return None


def workspace_registry_config(start: Path) -> dict[str, str]:
    """`registry.{default, remote_url}` from the nearest murmur.yaml (empty when none)."""
    import yaml

    directory = find_manifest_dir(start)
    if directory is None:
        return {}
    path = directory / "murmur.yaml"
    try:
        root = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise MurError("E-IO-003", f"failed to read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise MurError("E-IO-003", f"failed to parse {path}: {exc}") from exc
    registry = root.get("registry") if isinstance(root, dict) else None
    if registry is None:
        return {}
    if not isinstance(registry, dict):
        raise MurError("E-IO-003", f"failed to parse {path}: registry: expected a mapping")
    out = {}
    for key in ("default", "remote_url"):
        value = registry.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise MurError("E-IO-003", f"failed to parse {path}: registry.{key}: expected a string")
        out[key] = value
    return out


def resolve_registry(
    override: str | None = None, *, cwd: Path | None = None, transport: Any = None, env: dict | None = None,
    progress: Transfer | None = None,
) -> LocalRegistry | RemoteRegistry:
    """The registry a command should use (see module docstring for the order)."""
    import os

    environ = os.environ if env is None else env
    url: str | None = None
    if override is not None:
        if override.strip().lower() == "local":
            return LocalRegistry()
        url = override.strip().rstrip("/")
    else:
        config = workspace_registry_config(cwd or Path.cwd())
        remote = (config.get("remote_url") or "").strip()
        if remote:
            url = remote.rstrip("/")
        else:
            default = config.get("default")
            if default in (None, "local"):
                return LocalRegistry()
            if default != "remote":
                raise MurError("E-IO-003", f"invalid registry.default '{default}' (expected local|remote)",
                               "set registry.default in the project's murmur.yaml to local or remote")
            url = DEFAULT_REMOTE_REGISTRY
    api_key = environ.get("NEXUS_API_KEY")
    if api_key is None:
        raise MurError(
            "E-IO-003",
            "NEXUS_API_KEY is required for remote registry mode. Set it or use local mode.",
            "export NEXUS_API_KEY=<key>, or pass --registry local",
        )
    return RemoteRegistry(url, api_key, transport=transport, progress=progress)
