"""What a front is told (front.json) and what it reports (state.json), both beside each other.

front.json is written by deploy (atomically; `generation` grows with every change) and read by the
front at start, on SIGHUP, and whenever its modification time changes (a lost signal costs at most
one poll). state.json is written by the front after every change it applied or refused, and while
backends drain; the operator's side waits on its `generation` and reads `error` (mur.front.control).

Backend roles:
  active    new requests go here (exactly one once the front serves)
  draining  only requests about tasks it owns; followed until its tasks ended (mur.front.drain)
  standby   nothing, unless the active one refuses connections (a fallback during a deploy)
A backend that disappears from front.json is retired: the front no longer talks to it, and answers
`tasks/get` for its finished tasks from its cache.

The front runs on the target inside the pinned runtime, so this module uses the standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

ROLES = ("active", "draining", "standby")
CONFIG_NAME = "front.json"
STATE_NAME = "state.json"
CONTROL_NAME = "control.sock"
TASKS_NAME = "tasks.json"  # finished tasks of retired backends, answered from here (private: task results)


class ConfigError(ValueError):
    """front.json is unreadable or says something impossible (the front keeps what it had)."""


@dataclass(frozen=True)
class Backend:
    name: str  # what it serves, e.g. "release-3": shown in state.json and logs
    port: int  # on 127.0.0.1
    role: str = "active"


@dataclass(frozen=True)
class FrontConfig:
    listen_port: int
    backends: tuple[Backend, ...] = ()
    listen_host: str = "127.0.0.1"
    generation: int = 1
    tls_cert: str | None = None  # the front speaks HTTPS with this certificate and key
    tls_key: str | None = None
    backend_pin: str | None = None  # the backends speak HTTPS; their certificate's SHA-256 (DER)
    token_file: str | None = None  # the deployment's bearer token: cached answers check it
    drain_timeout: float = 300.0  # a draining backend counts as drained after this long regardless
    connect_wait: float = 30.0  # how long a request waits for a backend that refuses connections
    switch_wait: float = 30.0  # how long a new active backend has to answer its agent card
    busy_wait: float = 10.0  # how long a message/send answered "capsule is busy" is retried (0: never)
    retain_tasks: int = 1000  # finished tasks of retired backends kept for tasks/get
    max_connections: int = 512
    head_timeout: float = 10.0  # from accept (or the end of the previous answer) to a complete request head
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def active(self) -> Backend | None:
        return next((b for b in self.backends if b.role == "active"), None)

    @property
    def draining(self) -> tuple[Backend, ...]:
        return tuple(b for b in self.backends if b.role == "draining")

    def backend(self, name: str) -> Backend | None:
        return next((b for b in self.backends if b.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "extra"}
        out["backends"] = [asdict(b) for b in self.backends]
        return {**self.extra, **out}

    @classmethod
    def from_dict(cls, data: Any) -> "FrontConfig":
        if not isinstance(data, dict):
            raise ConfigError("front.json must hold a JSON object")
        known = {f.name for f in fields(cls)} - {"extra", "backends"}
        kw = {k: data[k] for k in known if k in data and data[k] is not None}
        try:
            backends = tuple(Backend(str(b["name"]), int(b["port"]), str(b.get("role", "active")))
                             for b in data.get("backends") or ())
            cfg = cls(**kw, backends=backends, extra={k: v for k, v in data.items() if k not in known | {"backends"}})
            cfg = replace(cfg, listen_port=int(cfg.listen_port), generation=int(cfg.generation))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"front.json: {exc}") from exc
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if not 0 < self.listen_port < 65536:
            raise ConfigError(f"listen_port {self.listen_port} is not a TCP port")
        names = [b.name for b in self.backends]
        if len(set(names)) != len(names):
            raise ConfigError(f"backend names repeat: {names}")
        for b in self.backends:
            if b.role not in ROLES:
                raise ConfigError(f"backend {b.name}: role '{b.role}' is not one of {', '.join(ROLES)}")
            if not 0 < b.port < 65536 or b.port == self.listen_port:
                raise ConfigError(f"backend {b.name}: port {b.port} is not a free TCP port beside the front's")
        if sum(b.role == "active" for b in self.backends) > 1:
            raise ConfigError("more than one active backend")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("tls_cert and tls_key go together")


def load(path: Path | str) -> FrontConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return FrontConfig.from_dict(json.loads(text))
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def write_json(path: Path | str, data: dict[str, Any], mode: int = 0o600) -> None:
    """Whole-file replace (temp file + rename), so a reader never sees half of it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_state(path: Path | str) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
