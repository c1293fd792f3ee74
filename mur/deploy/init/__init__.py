"""Init systems as command builders: how a deployment's service is started, stopped, read and
removed on a target. One implementation per init system; `init_for` is the only place that
chooses (no `if init ==` elsewhere).

Every builder returns steps (mur.deploy.steps) or shell text; nothing here touches a machine.
"""

from __future__ import annotations

from typing import Protocol

from mur.deploy.init.service import prestart_script, run_argv, service_env
from mur.deploy.steps import Layout, Run, ServiceConfig, ServiceState, Step

__all__ = ["InitSystem", "init_for", "prestart_script", "run_argv", "service_env"]


class InitSystem(Protocol):
    name: str

    def start(self, lay: Layout, sudo: bool, restart: bool = False, switch: str | None = None) -> list[Step]:
        """(Re)start the service of `current` (restart: it may be running an older release); with
        `switch` (`releases/N`), point `current` there first, in the same remote command as the
        (re)start where the init system allows it, so a lost link cannot split them."""

    def stop(self, lay: Layout, sudo: bool) -> list[Step]:
        """Stop the whole process tree; idempotent."""

    def remove(self, lay: Layout, sudo: bool) -> list[Step]:
        """Undo what start installed outside the deployment directory (unit, boot hook)."""

    def install_boot(self, lay: Layout, svc: ServiceConfig, sudo: bool) -> list[Step]:
        """Make the service come back after a reboot (svc.boot says how); [] for "none"."""

    def status(self, lay: Layout, sudo: bool) -> Run:
        """One command whose output `parse_status` reads."""

    def parse_status(self, out: str) -> ServiceState: ...

    def logs(self, lay: Layout, lines: int, follow: bool, sudo: bool) -> Run:
        """The command that prints (follow: streams) the service's log."""


def init_for(name: str) -> InitSystem:
    from mur.deploy.init import supervisor, systemd

    systems: dict[str, InitSystem] = {"systemd": systemd.SYSTEMD, "supervisor": supervisor.SUPERVISOR}
    try:
        return systems[name]
    except KeyError:
        from mur.errors import MurError

        raise MurError("E-DEPLOY-001", f"unknown init system '{name}'", "use --init auto, systemd or supervisor") from None
