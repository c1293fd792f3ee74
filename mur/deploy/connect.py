"""Target coordinates (what the user typed, what the record keeps) -> a connected Target."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

from mur.deploy.targets.base import Target
from mur.errors import MurError


@dataclass(frozen=True)
class TargetSpec:
    provider: str  # "local" | "ssh" | "docker"
    host: str = ""
    port: int = 22
    user: str = ""
    key_file: str | None = None
    known_hosts: str | None = None

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> "TargetSpec":
        t = rec.get("target")
        if not isinstance(t, dict):  # an upstream-shaped record: only `ip` is known
            return cls(provider=rec.get("provider", "ssh"), host=rec.get("ip", ""), user="root")
        return cls(provider=t.get("provider") or rec.get("provider", "ssh"), host=t.get("host") or "",
                   port=int(t.get("port") or 22), user=t.get("user") or "", key_file=t.get("key_file"),
                   known_hosts=t.get("known_hosts"))

    def same_place(self, other: "TargetSpec") -> bool:
        return (self.provider, self.host, self.port, self.user) == (other.provider, other.host, other.port, other.user)


def connect(spec: TargetSpec, *, trust_new_host: bool = False, note: Callable[[str], None] | None = None,
            connect_budget: float | None = None) -> Target:
    """Open the transport for an SSH or local target (Docker goes through DockerEngine)."""
    if spec.provider == "local":
        from mur.deploy.targets.local import LocalTarget

        return LocalTarget()
    if spec.provider == "ssh":
        from mur.deploy.targets.ssh import CONNECT_BUDGET, SSHTarget

        return SSHTarget(spec.host, user=spec.user or "root", port=spec.port, key_file=spec.key_file,
                         known_hosts=spec.known_hosts, trust_new_host=trust_new_host, note=note,
                         connect_budget=connect_budget or CONNECT_BUDGET)
    raise MurError("E-DEPLOY-001", f"unknown provider '{spec.provider}'")
