"""The fleet file: `deploy.yaml` beside `murmur.yaml`, naming where one capsule runs (pydantic models).

    name: hello                      # the fleet (default: the capsule's name)
    defaults:                        # every target: SSH user/port/key, env, env and secrets files, options
      user: deployer
      key: ~/.ssh/id_ed25519
      env_file: .env
    groups:                          # roles: settings shared by the targets that list them
      canary: {env: {GREETING: Hi}}
    targets:
      web-1: {host: 203.0.113.7}
      web-2: {host: 203.0.113.8, groups: [canary]}
      box:   {docker: {}}            # the local (or DOCKER_HOST) engine
      here:  {local: true}           # this machine
    rollout:
      batch: 1                       # targets switched at once: a count or "25%"
      smoke: {message: ping, expect: pong}
      rollback: true                 # a failure returns the switched targets to their previous release

A destination (`--destination staging`) is `deploy.staging.yaml` beside it, merged over it key by key
(mappings merge, anything else replaces; `null` removes), as Kamal's destinations are. Settings
resolve per target: defaults, then each group it lists (in order), then the target itself; env files
first, then env values, then secrets files (KEY=VALUE, readable by their owner only), then `--env`.
`mur schema fleet` prints the JSON Schema of this file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from mur.deploy.targets.address import split_address
from mur.errors import MurError

FLEET_FILENAME = "deploy.yaml"
NAME = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62})$")
PERCENT = re.compile(r"^(100|[1-9][0-9]?)%$")
CODE = "E-FLEET-001"


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Settings(Model):
    """What defaults, a group and a target may each set (the most specific one wins)."""

    user: Optional[str] = Field(None, description="SSH user (default root; a non-root user uses sudo -n where needed)")
    port: Optional[int] = Field(None, gt=0, lt=65536, description="SSH port (default 22)")
    key: Optional[str] = Field(None, description="SSH private key file (default: agent, ~/.ssh/id_*)")
    known_hosts: Optional[str] = Field(None, description="known_hosts file (default ~/.ssh/known_hosts)")
    env: dict[str, str] = Field(default_factory=dict, description="KEY: value for the service")
    env_file: Optional[str] = Field(None, description="KEY=VALUE file, relative to this file")
    secrets_file: Optional[str] = Field(
        None, description="KEY=VALUE file of secrets (mode 0600, never printed), relative to this file")
    publish: Optional[bool] = Field(None, description="listen on all interfaces (the token is always required)")
    tls: Optional[Literal["self-signed"]] = Field(None, description="HTTPS with a generated, pinned certificate")
    init: Optional[Literal["auto", "systemd", "supervisor"]] = Field(None, description="supervision")
    base_image: Optional[str] = Field(None, description="Docker base image (images/build-base.sh)")
    no_boot_hook: Optional[bool] = Field(
        None, description="accept a service that does not come back after a reboot (no systemd, no cron there)")

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"'{key}' is not a valid environment variable name")
        return value


class Docker(Model):
    """A container on the engine `mur deploy --docker` uses (DOCKER_HOST, else the local socket)."""


class Target(Settings):
    host: Optional[str] = Field(None, description="an SSH target: the machine's address or name")
    docker: Optional[Docker] = Field(None, description="a Docker target: a container on this engine")
    local: bool = Field(False, description="this machine")
    groups: list[str] = Field(default_factory=list, description="groups (roles) whose settings apply, in order")

    @model_validator(mode="after")
    def _one_kind(self) -> "Target":
        kinds = [k for k, on in (("host", self.host is not None), ("docker", self.docker is not None),
                                 ("local", self.local)) if on]
        if len(kinds) != 1:
            raise ValueError("a target is exactly one of: host (SSH), docker, local: true"
                             + (f" (it sets {', '.join(kinds)})" if kinds else ""))
        if self.host is not None:
            split_address(self.host)  # HOST, USER@HOST:PORT, ...: a ValueError says what is wrong
        return self

    @property
    def kind(self) -> str:
        return "ssh" if self.host is not None else "docker" if self.docker is not None else "local"


class Smoke(Model):
    message: str = Field("ping", description="the task sent to each new release before it takes traffic")
    expect: Optional[str] = Field(None, description="text its answer must contain (default: it completes)")
    timeout: float = Field(60.0, gt=0, description="seconds for the answer")


class Rollout(Model):
    batch: Union[int, str] = Field(1, description='targets switched at once: a count, or a percentage ("25%")')
    smoke: Optional[Smoke] = Field(None, description="the smoke task (default: the authenticated health check only)")
    rollback: bool = Field(True, description="on a failure, return the targets already switched to their previous release")
    front: bool = Field(True, description="SSH and local targets get a front at their first deploy: a new release "
                                          "takes the address without a request refused (docs/deploy.md, Fleets)")

    @field_validator("batch")
    @classmethod
    def _batch(cls, value: Union[int, str]) -> Union[int, str]:
        if isinstance(value, bool) or (isinstance(value, int) and value < 1):
            raise ValueError("batch is a count of at least 1, or a percentage like \"25%\"")
        if isinstance(value, str) and not PERCENT.match(value.strip()):
            raise ValueError(f"batch '{value}' is neither a count nor a percentage like \"25%\"")
        return value


class Fleet(Model):
    """deploy.yaml."""

    model_config = ConfigDict(extra="forbid", strict=True, title="mur fleet file (deploy.yaml beside murmur.yaml)")

    name: Optional[str] = Field(None, description="the fleet's name (default: the capsule's name)")
    manifest: str = Field("murmur.yaml", description="the capsule manifest, relative to this file")
    defaults: Settings = Field(default_factory=Settings, description="settings for every target")
    groups: dict[str, Settings] = Field(default_factory=dict, description="named settings that targets list")
    targets: dict[str, Target] = Field(description="where the capsule runs, by name")
    rollout: Rollout = Field(default_factory=Rollout, description="how a deploy moves through the targets")

    @model_validator(mode="after")
    def _names(self) -> "Fleet":
        if not self.targets:
            raise ValueError("targets: name at least one target")
        for kind, names in (("target", self.targets), ("group", self.groups)):
            for name in names:
                if not NAME.match(name):
                    raise ValueError(f"{kind} name '{name}': use lowercase letters, digits, '.', '_' and '-' "
                                     "(at most 63, starting with a letter or digit)")
        both = set(self.targets) & set(self.groups)
        if both:
            raise ValueError(f"'{sorted(both)[0]}' names both a target and a group")
        for tname, target in self.targets.items():
            for g in target.groups:
                if g not in self.groups:
                    raise ValueError(f"target '{tname}' lists group '{g}', which groups: does not define")
        if self.name is not None and not NAME.match(self.name):
            raise ValueError(f"name '{self.name}': use lowercase letters, digits, '.', '_' and '-'")
        return self


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of deploy.yaml (`mur schema fleet`)."""
    schema = Fleet.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def merge(base: Any, overlay: Any) -> Any:
    """A destination over the base file: mappings merge key by key, `null` removes, anything else replaces."""
    if not isinstance(base, dict) or not isinstance(overlay, dict):
        return overlay
    out = dict(base)
    for key, value in overlay.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(base.get(key), value)
    return out


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if p not in ("function-after[_one_kind(), Target]",)) or "(top level)"


def validate(data: Any, shown: str) -> Fleet:
    """The models over parsed YAML; E-FLEET-001 naming the field path and what is wrong."""
    if not isinstance(data, dict):
        raise MurError(CODE, f"{shown}: expected a mapping of fleet settings (targets:, groups:, ...)")
    try:
        return Fleet.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required"
        value = err.get("input")
        shown_value = f" (got {value!r})" if err["type"] not in ("missing", "model_type") and \
            not isinstance(value, dict) and value is not None else ""
        raise MurError(CODE, f"{shown}: {_where(loc)}: {msg}{shown_value}",
                       "`mur schema fleet` prints every key this file takes") from exc


def find_fleet_file(manifest: Path, explicit: Path | None = None) -> Path | None:
    """deploy.yaml beside the manifest (or the file given), else None."""
    if explicit is not None:
        return explicit
    path = manifest.resolve().parent / FLEET_FILENAME
    return path if path.is_file() else None


def read(path: Path, destination: str | None = None) -> Fleet:
    """deploy.yaml, with `deploy.<destination>.yaml` merged over it."""
    from mur.manifest.yamlio import parse_yaml

    data = parse_yaml(_text(path), path.name, CODE)
    if destination:
        if not NAME.match(destination):
            raise MurError("E-DEPLOY-001", f"--destination '{destination}': use lowercase letters, digits, '.', '_' and '-'",
                           "e.g. --destination staging (reads deploy.staging.yaml)")
        overlay_path = path.with_name(f"{path.stem}.{destination}{path.suffix}")
        if not overlay_path.is_file():
            raise MurError(CODE, f"destination '{destination}': {overlay_path} does not exist",
                           f"create {overlay_path.name} beside {path.name} with what differs for {destination}")
        data = merge(data if isinstance(data, dict) else {}, parse_yaml(_text(overlay_path), overlay_path.name, CODE))
    return validate(data if data is not None else {}, path.name + (f" + {path.stem}.{destination}{path.suffix}"
                                                                  if destination else ""))


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise MurError("E-IO-001", f"fleet file not found: {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise MurError("E-IO-001", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
