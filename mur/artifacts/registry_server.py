"""`mur registry serve`: the Nexus HTTP API (upstream section 5.3) over a disk store.

    POST /v1/artifacts?name=&version=&runtime=wasm|native|static[&platform=os-arch...]
         body: raw .mur.zip  ->  201 {"artifact_id": "name@version", "sha256": "..."}
         400 bad input, 409 exists, 413 too large, 422 reserved version (upstream's exact body)
    GET  /v1/artifacts/{name}/{version}[?platform=os-arch]
         -> 200 bytes + x-murmur-sha256; the platform variant, else the generic file; 404 otherwise
    GET  /v1/artifacts  -> [{name, version, runtime, artifact_runtime, platforms, description, tags}]

Every endpoint wants `Authorization: Bearer <NEXUS_API_KEY>` (401 {"error":"unauthorized"},
compared in constant time). Storage is ``mur.artifacts.store.Store`` rooted at the data
directory, so publishes are atomic and serialized per name@version with ``flock``: of N
concurrent POSTs of one name@version exactly one gets 201, the rest 409 — also across several
server processes sharing a data directory. Uploads stream to a temp file (hashing as they go)
and are checked to be a readable .mur.zip whose packed name/version match the query.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import uuid
import warnings
from pathlib import Path
from typing import Callable

from mur.artifacts.store import RUNTIME_TYPES, ArtifactMeta, Store, split_platform, validate_version_segment
from mur.digits import is_digits
from mur.errors import MurError

DEFAULT_BIND = "127.0.0.1:7800"
DEFAULT_MAX_UPLOAD = 512 * 1024 * 1024


def _json(status: int, body):
    from starlette.responses import JSONResponse

    return JSONResponse(body, status_code=status)


def _err(status: int, message: str):
    return _json(status, {"error": message})


def create_app(data_dir: Path, api_key: str, *, max_upload_bytes: int = DEFAULT_MAX_UPLOAD):
    """The Starlette application serving `data_dir`."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import FileResponse
    from starlette.routing import Route

    from mur.artifacts.package import ArchiveError, read_manifest_bytes
    from mur.artifacts.registry_client import is_reserved_version
    from mur.manifest.artifact import validate_artifact_name

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    uploads = data_dir / ".uploads"
    uploads.mkdir(exist_ok=True)
    store = Store(data_dir)
    expected = f"Bearer {api_key}".encode()

    def authorized(request: Request) -> bool:
        given = request.headers.get("authorization", "").encode()
        return hmac.compare_digest(given, expected)

    async def publish(request: Request):
        if not authorized(request):
            return _err(401, "unauthorized")
        query = request.query_params
        for key in ("name", "version", "runtime"):
            if not query.get(key):
                return _err(400, f"missing required query parameter '{key}'")
        name, version, runtime = query["name"], query["version"], query["runtime"]
        try:
            validate_artifact_name(name)
        except MurError as err:
            return _err(400, err.message)
        if is_reserved_version(version):
            return _err(422, f"reserved artifact version '{version}' is not allowed")
        try:
            validate_version_segment(version)
        except MurError as err:
            return _err(400, err.message)
        if runtime.lower() not in RUNTIME_TYPES:
            return _err(400, f"invalid runtime '{runtime}' (expected wasm|native|static)")
        platforms = []
        for tag in query.getlist("platform"):
            pair = split_platform(tag)
            if pair is None:
                return _err(400, f"invalid platform '{tag}' (expected os-arch, e.g. darwin-aarch64)")
            if pair not in platforms:
                platforms.append(pair)
        declared = request.headers.get("content-length")
        if declared and is_digits(declared) and int(declared) > max_upload_bytes:
            return _err(413, f"artifact exceeds the {max_upload_bytes}-byte upload limit")

        tmp = uploads / f"{uuid.uuid4().hex}.upload"
        digest = hashlib.sha256()
        size = 0
        try:
            with open(tmp, "wb") as fh:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > max_upload_bytes:
                        return _err(413, f"artifact exceeds the {max_upload_bytes}-byte upload limit")
                    digest.update(chunk)
                    fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
            if size == 0:
                return _err(400, "empty request body (expected the raw .mur.zip bytes)")
            try:
                manifest, _ = read_manifest_bytes(tmp.read_bytes())
            except ArchiveError as exc:
                return _err(400, f"artifact body is not a valid .mur.zip: {exc}")
            if (manifest.name, manifest.version) != (name, version):
                return _err(
                    400, f"artifact body packs murmur.yaml for {manifest.name}@{manifest.version}, not {name}@{version}"
                )
            sha = digest.hexdigest()
            meta = ArtifactMeta(
                name=name,
                version=version,
                runtime=runtime.lower(),
                artifact_runtime=manifest.runtime,
                platforms=platforms,
                description=manifest.description or None,
            )
            try:
                await run_in_threadpool(store.put, meta, sha, src_file=tmp, overwrite=False)
            except MurError as err:
                if err.code == "E-REG-003":
                    return _err(409, f"artifact '{name}@{version}' already exists")
                return _err(500, err.message)
            return _json(201, {"artifact_id": f"{name}@{version}", "sha256": sha})
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    async def download(request: Request):
        if not authorized(request):
            return _err(401, "unauthorized")
        name = request.path_params["name"]
        version = request.path_params["version"]
        platform = request.query_params.get("platform") or None
        try:
            stored = await run_in_threadpool(store.lookup, name, version, platform)
        except MurError:
            stored = None
        if stored is None:
            if platform:
                return _err(404, f"artifact '{name}@{version}' has no variant for platform '{platform}'")
            return _err(404, f"artifact '{name}@{version}' not found")
        return FileResponse(
            stored.zip_path,
            media_type="application/octet-stream",
            headers={"x-murmur-sha256": stored.sha256},
        )

    async def index(request: Request):
        if not authorized(request):
            return _err(401, "unauthorized")
        try:
            rows = await run_in_threadpool(store.list_index)
        except MurError as err:
            return _err(500, err.message)
        return _json(200, [m.to_dict() for m in rows])

    async def http_error(request: Request, exc: HTTPException):
        return _err(exc.status_code, exc.detail if isinstance(exc.detail, str) else "error")

    routes = [
        Route("/v1/artifacts", publish, methods=["POST"]),
        Route("/v1/artifacts", index, methods=["GET"]),
        Route("/v1/artifacts/{name}/{version}", download, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


def parse_bind(bind: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` -> (host, port); E-IO-003 when malformed."""
    host, sep, port = bind.rpartition(":")
    if not sep or not is_digits(port) or not host:
        raise MurError("E-IO-003", f"invalid bind address '{bind}' (expected host:port, e.g. 127.0.0.1:7800)",
                       "e.g. --bind 127.0.0.1:7800")
    return host.strip("[]"), int(port)


def serve(
    bind: str,
    data_dir: Path,
    api_key: str,
    *,
    on_ready: Callable[[str], None] | None = None,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD,
) -> None:
    """Bind (port 0 picks a free port), report the URL through `on_ready`, serve until signalled."""
    import uvicorn

    if not api_key:
        raise MurError(
            "E-IO-003",
            "NEXUS_API_KEY is required to run the registry: it is the bearer token every client must present",
            "export NEXUS_API_KEY=<a long random secret>, then run `mur registry serve` again",
        )
    host, port = parse_bind(bind)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise MurError("E-IO-003", f"cannot bind the registry to {bind}: {exc.strerror or exc}") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    app = create_app(data_dir, api_key, max_upload_bytes=max_upload_bytes)
    if on_ready is not None:
        on_ready(f"http://{shown}:{actual}")
    # A Ctrl-C between uvicorn making its serve coroutine and running it leaves that coroutine
    # unawaited, and Python warns so on stderr as the process ends: the interrupt says it all.
    warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
