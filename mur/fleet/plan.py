"""A fleet file resolved into what a rollout does: the selected targets, each with its coordinates,
settings and environment, in batches (pure data; mur.fleet.rollout applies it).

    plan = resolve(fleet, path, capsule="hello", only=["web"], env_args=["DEBUG=1"])
    for batch in plan.batches(): ...
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur.digits import is_digits
from mur.resolve.env import parse, parse_env_args
from mur.deploy.targets import TargetSpec
from mur.deploy.targets.address import split_address
from mur.errors import MurError
from mur.fleet.config import Fleet, Settings, Smoke, Target

SETTINGS = ("user", "port", "key", "known_hosts", "publish", "tls", "init", "base_image", "no_boot_hook")


@dataclass(frozen=True)
class TargetPlan:
    name: str
    kind: str  # ssh | docker | local
    spec: TargetSpec
    groups: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    secret_keys: frozenset[str] = frozenset()
    publish: bool = False
    tls: str | None = None
    init: str = "auto"
    base_image: str | None = None
    no_boot_hook: bool = False

    @property
    def where(self) -> str:
        """How the target is reached, for reports (never an env value)."""
        if self.kind == "ssh":
            return self.spec.label
        return self.kind

    def tag(self, fleet: "FleetPlan") -> dict[str, Any]:
        """What a deployment record keeps about its place in the fleet (`hello@web-1` finds it)."""
        return {"name": fleet.name, "destination": fleet.destination, "target": self.name, "groups": list(self.groups)}


@dataclass(frozen=True)
class FleetPlan:
    name: str
    destination: str | None
    file: Path
    manifest: Path
    targets: tuple[TargetPlan, ...]
    all_targets: tuple[str, ...]  # every target the file names (a partial rollout says what it left out)
    batch: int | str = 1
    smoke: Smoke | None = None
    rollback: bool = True
    front: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The fleet's identity: its name, and the destination when there is one."""
        return f"{self.name}.{self.destination}" if self.destination else self.name

    def batch_size(self) -> int:
        if isinstance(self.batch, str):
            return max(1, math.floor(len(self.targets) * int(self.batch.strip().rstrip("%")) / 100))
        return max(1, min(int(self.batch), len(self.targets)))

    def batches(self) -> list[tuple[TargetPlan, ...]]:
        n = self.batch_size()
        return [self.targets[i:i + n] for i in range(0, len(self.targets), n)]


def parse_batch(text: str) -> int | str:
    """`--batch N` or `--batch P%`."""
    from mur.fleet.config import PERCENT

    text = text.strip()
    if is_digits(text) and int(text) >= 1:
        return int(text)
    if PERCENT.match(text):
        return text
    raise MurError("E-DEPLOY-001", f"--batch '{text}' is neither a count (1, 2, ...) nor a percentage (25%)",
                       "e.g. --batch 2 or --batch 25%")


def _layers(fleet: Fleet, target: Target) -> list[Settings]:
    return [fleet.defaults, *(fleet.groups[g] for g in target.groups), target]


def _read_env(path: Path, secret: bool, shown: str) -> dict[str, str]:
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise MurError("E-IO-001", f"{shown}: {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise MurError("E-IO-001", f"cannot read {shown} {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    if secret and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise MurError("E-FLEET-001", f"{shown} {path} is readable by other users (mode {stat.S_IMODE(st.st_mode):o})",
                       f"chmod 600 {path}")
    return parse(text, str(path))


def target_env(fleet: Fleet, target: Target, base: Path, cli_env: dict[str, str]) -> tuple[dict[str, str], set[str]]:
    """(env, the keys that came from secrets files) of one target, in precedence order."""
    env: dict[str, str] = {}
    secrets: set[str] = set()
    layers = _layers(fleet, target)
    for layer in layers:
        if layer.env_file:
            env.update(_read_env(base / os.path.expanduser(layer.env_file), False, "env_file"))
        env.update(layer.env)
    for layer in layers:
        if layer.secrets_file:
            values = _read_env(base / os.path.expanduser(layer.secrets_file), True, "secrets_file")
            env.update(values)
            secrets |= set(values)
    env.update(cli_env)
    secrets -= set(cli_env)
    return env, secrets


def _setting(fleet: Fleet, target: Target, name: str) -> Any:
    value = None
    for layer in _layers(fleet, target):
        if getattr(layer, name) is not None:
            value = getattr(layer, name)
    return value


def _path(value: str | None, base: Path) -> str | None:
    return str((base / os.path.expanduser(value)).resolve()) if value else None


def target_plan(fleet: Fleet, name: str, base: Path, cli_env: dict[str, str]) -> TargetPlan:
    t = fleet.targets[name]
    s = {k: _setting(fleet, t, k) for k in SETTINGS}
    env, secrets = target_env(fleet, t, base, cli_env)
    if t.kind == "ssh":
        spec = TargetSpec.ssh(str(t.host), s["user"], s["port"], key_file=_path(s["key"], base),
                              known_hosts=_path(s["known_hosts"], base), where=f"target {name}: host", code="E-FLEET-001")
    else:
        spec = TargetSpec(t.kind)
    return TargetPlan(name=name, kind=t.kind, spec=spec, groups=tuple(t.groups), env=tuple(sorted(env.items())),
                      secret_keys=frozenset(secrets), publish=bool(s["publish"]), tls=s["tls"], init=s["init"] or "auto",
                      base_image=s["base_image"], no_boot_hook=bool(s["no_boot_hook"]))


def _same_host(written: str, asked: str) -> bool:
    """Whether `--host asked` names the target written `host: written` (its host, and its user and
    port where both say one: `--host h` selects `host: deployer@h:2222`)."""
    try:
        mine, theirs = split_address(written), split_address(asked)
    except ValueError:
        return False
    return mine[0].lower().rstrip(".") == theirs[0].lower().rstrip(".") and all(
        a is None or b is None or a == b for a, b in zip(mine[1:], theirs[1:]))


def select(fleet: Fleet, only: list[str], host: str | None) -> list[str]:
    """The target names `--only` (targets or groups, comma-separated or repeated) and `--host` leave."""
    names = list(fleet.targets)
    wanted = [w.strip() for item in only for w in item.split(",") if w.strip()]
    if wanted:
        unknown = [w for w in wanted if w not in fleet.targets and w not in fleet.groups]
        if unknown:
            raise MurError("E-FLEET-002", f"--only {unknown[0]}: no target or group of that name",
                           f"targets: {', '.join(fleet.targets)}" + (f"; groups: {', '.join(fleet.groups)}"
                                                                     if fleet.groups else ""))
        names = [n for n in names if n in wanted or set(fleet.targets[n].groups) & set(wanted)]
    if host is not None:
        names = [n for n in names if fleet.targets[n].host is not None and _same_host(fleet.targets[n].host, host)]
        if not names:
            hosts = sorted({t.host for t in fleet.targets.values() if t.host})
            raise MurError("E-FLEET-002", f"--host {host}: no selected target of the fleet is that host",
                           f"its SSH targets: {', '.join(hosts) or 'none'}; `--no-fleet` deploys outside the fleet")
    return names


def resolve(fleet: Fleet, path: Path, *, capsule: str, destination: str | None = None, only: list[str] | None = None,
            host: str | None = None, env_args: list[str] | None = None, batch: int | str | None = None) -> FleetPlan:
    base = path.resolve().parent
    names = select(fleet, only or [], host)
    cli_env = parse_env_args(list(env_args or []))
    plan = FleetPlan(name=fleet.name or capsule, destination=destination, file=path.resolve(),
                     manifest=(base / fleet.manifest).resolve(),
                     targets=tuple(target_plan(fleet, n, base, cli_env) for n in names), all_targets=tuple(fleet.targets),
                     batch=fleet.rollout.batch if batch is None else batch, smoke=fleet.rollout.smoke,
                     rollback=fleet.rollout.rollback, front=fleet.rollout.front)
    places = {}
    for t in plan.targets:
        key = (t.kind, t.spec.host, t.spec.port)
        if key in places:
            raise MurError("E-FLEET-001", f"{path.name}: targets '{places[key]}' and '{t.name}' are the same place ({t.where})",
                           "one deployment per capsule and place: remove one of them")
        places[key] = t.name
    return plan
