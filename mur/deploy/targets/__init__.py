"""Targets: the seam every host operation goes through (base.py), one adapter per transport.

    spec = TargetSpec("ssh", host="203.0.113.7", user="deployer", key_file="~/.ssh/id_ed25519")
    with connect(spec) as target:          # SSHTarget | LocalTarget (Docker: mur.engine + targets.docker)
        target.run("uname -a")
        target.put_file(Path("x"), "/tmp/x", 0o644)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

from mur.deploy.targets.base import Target
from mur.errors import MurError


@dataclass(frozen=True)
class TargetSpec:
    """Target coordinates: what the user typed, what the record keeps."""

    provider: str  # "local" | "ssh" | "docker"
    host: str = ""
    port: int = 22
    user: str = ""
    key_file: str | None = None
    known_hosts: str | None = None

    @classmethod
    def ssh(cls, address: str, user: str | None = None, port: int | None = None, key_file: str | None = None,
            known_hosts: str | None = None, where: str = "--host", code: str = "E-DEPLOY-001") -> "TargetSpec":
        """An SSH target from an address as typed (mur.deploy.targets.address: USER@HOST:PORT and its
        shorter forms) and the user and port given apart (None: not given). MurError(`code`) if bad."""
        from mur.deploy.targets.address import ssh_coordinates

        host, user, port = ssh_coordinates(address, user, port, where=where, code=code)
        return cls("ssh", host=host, port=port, user=user, key_file=key_file, known_hosts=known_hosts)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, t: Any, provider: str, ip: str = "") -> "TargetSpec":
        if not isinstance(t, dict):  # an upstream-shaped record: only `ip` is known
            return cls(provider=provider, host=ip, user="root")
        return cls(provider=t.get("provider") or provider, host=t.get("host") or "", port=int(t.get("port") or 22),
                   user=t.get("user") or "", key_file=t.get("key_file"), known_hosts=t.get("known_hosts"))

    def same_place(self, other: "TargetSpec") -> bool:
        return (self.provider, self.host, self.port, self.user) == (other.provider, other.host, other.port, other.user)

    @property
    def label(self) -> str:
        if self.provider == "ssh":
            return f"{self.user or 'root'}@{self.host}" + (f":{self.port}" if self.port != 22 else "")
        return self.provider


def connect(spec: TargetSpec, *, trust_new_host: bool = False, note: Callable[[str], None] | None = None,
            connect_budget: float | None = None) -> Target:
    """Open the transport for an SSH or local target (Docker goes through mur.engine.docker.DockerEngine)."""
    if spec.provider == "local":
        from mur.deploy.targets.local import LocalTarget

        return LocalTarget()
    if spec.provider == "ssh":
        from mur.deploy.targets.ssh import CONNECT_BUDGET, SSHTarget

        return SSHTarget(spec.host, user=spec.user or "root", port=spec.port, key_file=spec.key_file,
                         known_hosts=spec.known_hosts, trust_new_host=trust_new_host, note=note,
                         connect_budget=connect_budget or CONNECT_BUDGET)
    raise MurError("E-DEPLOY-001", f"unknown target '{spec.provider}'")
