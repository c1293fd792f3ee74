"""What a capsule image is, as data: the layout inside it, its labels and its image config (pure).

The image config is serialized once, with sorted keys and no whitespace, and its sha256 *is* the
image ID (Docker and OCI alike): with the capsule layer reproducible (mur.image.layer) and the
`created` time fixed, the same inputs on the same base give the same ID.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from mur.digits import is_digits

# The non-root user the capsule runs as (also in the exported pod's securityContext).
UID = GID = 10001
USER = "mur"
HOME = "/home/mur"
CAPSULE_DIR = "/capsule"
WORKDIR = "/workdir"  # the one writable volume: the tools' workdir and the session records, side by side
TOOLS_WORKDIR = f"{WORKDIR}/work"  # `mur run --workdir`: what shell tools and guests may write
# `<manifest dir>/workdir` (where mur run keeps each session's record: trace, logs, results) links here: on
# the volume, never inside the tools' workdir, and /capsule itself stays read-only.
SESSIONS_DIR = f"{WORKDIR}/sessions"
# The staged wasm payloads of a session (mur.session.staging: `<cache root>/payloads`, private to the
# runtime) go to /tmp, which the root filesystem's read-only cache cannot hold; tools cannot reach /tmp.
PAYLOADS_DIR = "/tmp/mur-payloads"
# MURMUR_A2A_TOKEN given to the container (docker run --env-file) becomes a file here, 0600, before mur run.
TOKEN_TMP_DIR = "/tmp/mur-a2a"
RUNTIME_DIR = "/opt/mur/runtime"
DEFAULT_PORT = 8080
ENTRYPOINT = "/usr/local/bin/mur-serve"
HEALTHCHECK = "/usr/local/bin/mur-healthcheck"
LABEL_PREFIX = "dev.mur."
OCI = "org.opencontainers.image."
SECOND = 1_000_000_000  # Docker's Healthcheck durations are nanoseconds


def source_date_epoch(env: dict[str, str]) -> int:
    """SOURCE_DATE_EPOCH when set (reproducible-builds.org), else 0: the image does not record build time."""
    raw = env.get("SOURCE_DATE_EPOCH", "").strip()
    return int(raw) if is_digits(raw) else 0


def rfc3339(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@dataclass(frozen=True)
class ImageSpec:
    """Everything the image config is made of (no paths on this machine, no time of day)."""

    name: str
    version: str
    mur_version: str
    runtime_sha256: str
    capsule_digest: str
    lock_digest: str  # sha256 of the murmur.lock in the image, "" when the capsule has none
    base_ref: str
    base_id: str
    base_digest: str  # the base's registry (manifest) digest, "" for a locally imported base
    base_config: dict[str, Any]  # the base image's config (Env, Architecture, Os ...)
    base_diff_ids: tuple[str, ...]
    layer_diff_id: str
    port: int = DEFAULT_PORT
    created: int = 0
    uid: int = UID  # who the container runs as (and owns the compile cache and /workdir)
    gid: int = GID
    extra_labels: dict[str, str] = field(default_factory=dict)

    def labels(self) -> dict[str, str]:
        """OCI annotations plus mur's own; kept as config labels so they survive push, pull and save."""
        out = {
            f"{OCI}title": self.name,
            f"{OCI}version": self.version,
            f"{OCI}description": f"mur capsule {self.name} {self.version}, served over A2A on port {self.port}",
            f"{OCI}created": rfc3339(self.created),
            f"{OCI}base.name": self.base_ref,
            f"{LABEL_PREFIX}base.id": self.base_id,
            f"{LABEL_PREFIX}capsule.name": self.name,
            f"{LABEL_PREFIX}capsule.version": self.version,
            f"{LABEL_PREFIX}capsule.digest": self.capsule_digest,
            f"{LABEL_PREFIX}lock.digest": self.lock_digest or "none",
            f"{LABEL_PREFIX}mur_version": self.mur_version,
            f"{LABEL_PREFIX}runtime.sha256": self.runtime_sha256,
            f"{LABEL_PREFIX}port": str(self.port),
        }
        if self.base_digest:
            out[f"{OCI}base.digest"] = self.base_digest
        out.update(self.extra_labels)
        return out

    def env(self) -> list[str]:
        base = [e for e in (self.base_config.get("Env") or []) if not e.startswith(("HOME=", "MUR_"))]
        return sorted(base + [f"HOME={HOME}", "MURMUR_A2A_TIMEOUT_SECS=0", f"MUR_PORT={self.port}",
                              "MUR_CAPSULE_HOST=off",  # one capsule per container: a host would only add a process
                              "MUR_BIND=0.0.0.0", f"MUR_WORKDIR={TOOLS_WORKDIR}"])

    def config(self) -> dict[str, Any]:
        created = rfc3339(self.created)
        history = [{"created": created, "created_by": f"base image {self.base_ref} (layer {i + 1})"}
                   for i in range(len(self.base_diff_ids))]
        history.append({"created": created, "created_by": f"mur image build: capsule {self.name} {self.version}",
                        "comment": f"mur {self.mur_version}"})
        return {
            "architecture": self.base_config.get("Architecture") or "amd64",
            "os": self.base_config.get("Os") or "linux",
            "created": created,
            "author": "mur",
            "config": {
                "User": f"{self.uid}:{self.gid}",
                "Env": self.env(),
                "Entrypoint": [ENTRYPOINT],
                "WorkingDir": WORKDIR,
                "ExposedPorts": {f"{self.port}/tcp": {}},
                "Volumes": {WORKDIR: {}},
                "Labels": self.labels(),
                "StopSignal": "SIGTERM",
                "Healthcheck": {"Test": ["CMD", HEALTHCHECK], "Interval": 10 * SECOND, "Timeout": 5 * SECOND,
                                "StartPeriod": 120 * SECOND, "Retries": 3},
            },
            "rootfs": {"type": "layers", "diff_ids": [*self.base_diff_ids, f"sha256:{self.layer_diff_id}"]},
            "history": history,
        }

    def config_bytes(self) -> bytes:
        return canonical_json(self.config())


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# --- the scripts inside the image --------------------------------------------------------------


def serve_script(run_args: tuple[str, ...]) -> bytes:
    """The entrypoint: `mur run` serving A2A until stopped (MUR_BIND / MUR_PORT / MUR_WORKDIR override;
    MUR_ENV_FILE names an env file loaded first, since mur run is given --no-env-file; MURMUR_A2A_TOKEN,
    e.g. from `docker run --env-file`, becomes a private token file)."""
    extra = "".join(f" {a}" for a in run_args)
    return (
        "#!/bin/sh\n"
        "# The capsule served over A2A: waits for tasks until SIGTERM (MURMUR_A2A_TIMEOUT_SECS=0).\n"
        "# One JSON line on stdout when it is up; a tool's output never reaches it.\n"
        "# The session records and staged payloads live on the writable volumes (links in the image point there).\n"
        f"mkdir -p {SESSIONS_DIR} && mkdir -p -m 0700 {PAYLOADS_DIR} || exit 1\n"
        "# MUR_ENV_FILE: KEY=\"value\" lines (as `mur deploy` renders them; sh syntax) exported to mur run, so\n"
        "# secrets reach the capsule from a file copied into the container, never from the image or its config.\n"
        'if [ -n "${MUR_ENV_FILE:-}" ]; then set -a; . "$MUR_ENV_FILE" || exit 1; set +a; fi\n'
        "# MURMUR_A2A_TOKEN (docker run --env-file): the door's bearer token, handed to mur run as a file only\n"
        "# this user can read, and taken out of the environment the runtime and its tools inherit.\n"
        'if [ -n "${MURMUR_A2A_TOKEN:-}" ]; then\n'
        '  if [ -z "${MURMUR_A2A_TOKEN_FILE:-}" ]; then\n'
        f"    mkdir -p -m 0700 {TOKEN_TMP_DIR} && (umask 077 && printf '%s\\n' \"$MURMUR_A2A_TOKEN\" > {TOKEN_TMP_DIR}/token) || exit 1\n"
        f"    MURMUR_A2A_TOKEN_FILE={TOKEN_TMP_DIR}/token; export MURMUR_A2A_TOKEN_FILE\n"
        "  fi\n"
        "  unset MURMUR_A2A_TOKEN\n"
        "fi\n"
        f'exec /usr/local/bin/mur run --manifest {CAPSULE_DIR}/murmur.yaml --workdir "${{MUR_WORKDIR:-{TOOLS_WORKDIR}}}" \\\n'
        f'  --json --no-env-file --bind "${{MUR_BIND:-0.0.0.0}}" --port "${{MUR_PORT:-{DEFAULT_PORT}}}"{extra} "$@"\n'
    ).encode()


HEALTH_CALL = '{"jsonrpc":"2.0","id":"mur-healthcheck","method":"tasks/get","params":{"id":"mur-healthcheck"}}'


def healthcheck_script() -> bytes:
    """HEALTHCHECK (and the exported pod's probes): an authenticated JSON-RPC call answers 200.

    With a token (MURMUR_A2A_TOKEN_FILE, or MURMUR_A2A_TOKEN: Docker runs a healthcheck with the
    container's configured env, not the entrypoint's) it is presented, so a door that would refuse
    its callers (401) is unhealthy; `tasks/get` of a task that does not exist changes nothing. Over
    TLS (MURMUR_A2A_TLS_CERT) bash cannot speak, so there only the port is checked. bash's /dev/tcp:
    the base image has no HTTP client.
    """
    return (
        "#!/bin/bash\n"
        "# Healthy when the A2A door answers an authenticated JSON-RPC call with 200 on the serving port.\n"
        'host="${MUR_BIND:-0.0.0.0}"\n'
        'case "$host" in 0.0.0.0|"::"|"") host=127.0.0.1 ;; esac\n'
        f'exec 3<>"/dev/tcp/$host/${{MUR_PORT:-{DEFAULT_PORT}}}" || exit 1\n'
        '[ -n "${MURMUR_A2A_TLS_CERT:-}" ] && exit 0\n'
        'token="${MURMUR_A2A_TOKEN:-}"\n'
        "# (read fails at a missing final newline, as in a Secret's file, yet sets the token)\n"
        'if [ -z "$token" ] && [ -n "${MURMUR_A2A_TOKEN_FILE:-}" ]; then\n'
        '  read -r token < "$MURMUR_A2A_TOKEN_FILE" || [ -n "$token" ] || exit 1\n'
        "fi\n"
        f"body='{HEALTH_CALL}'\n"
        "{\n"
        "  printf 'POST / HTTP/1.0\\r\\nHost: %s\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n' \"$host\" \"${#body}\"\n"
        "  [ -n \"$token\" ] && printf 'Authorization: Bearer %s\\r\\n' \"$token\"\n"
        "  printf '\\r\\n%s' \"$body\"\n"
        "} >&3\n"
        "read -r -t 5 status <&3 || exit 1\n"
        'case "$status" in "HTTP/1."?" 200"*) exit 0 ;; esac\n'
        "exit 1\n"
    ).encode()


def runtime_wrapper(runtime_id: str) -> bytes:
    return (f"#!/bin/sh\n# The pinned mur runtime, unpacked into the image at build time.\n"
            f'exec {RUNTIME_DIR}/{runtime_id}/mur "$@"\n').encode()


def with_user(passwd: str, group: str) -> tuple[bytes, bytes]:
    """The base image's /etc/passwd and /etc/group plus the capsule user (replacing any same-name entry)."""
    def add(text: str, line: str) -> bytes:
        kept = [ln for ln in text.splitlines() if ln and not ln.startswith(f"{USER}:")]
        return ("\n".join(kept + [line]) + "\n").encode()

    return (add(passwd, f"{USER}:x:{UID}:{GID}:mur capsule:{HOME}:/usr/sbin/nologin"),
            add(group, f"{USER}:x:{GID}:"))


def run_lines(name: str, tag: str, port: int) -> dict[str, str]:
    """Shell lines that serve the image under a plain `docker run` and reach it (what `mur image build`
    prints). The door listens off loopback inside the container, so it needs a bearer token
    (E-A2A-005): `--env-file` carries it (the entrypoint turns MURMUR_A2A_TOKEN into a private file),
    so the host file can stay the operator's, mode 0600, and the token is on no command line."""
    import re
    import shlex

    base = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-._") or "capsule"
    env_file, container = f"{base}.a2a.env", f"mur-{base}"
    return {
        "token": f'(umask 077; echo "MURMUR_A2A_TOKEN=$(openssl rand -hex 32)" > {env_file})',
        "serve": (f"docker run -d --rm --name {container} -p 127.0.0.1:{port}:{port} --env-file {env_file} "
                  f"{shlex.quote(tag)}"),
        "send": f"(. ./{env_file} && export MURMUR_A2A_TOKEN && mur send 127.0.0.1:{port} hello)",
        "stop": f"docker stop {container}",
    }
