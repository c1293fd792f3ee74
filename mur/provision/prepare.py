"""`mur host prepare`: bring a Debian 12 host to the state deploy/'s user-data gives a new one.

Read the host (one round trip), plan (mur.provision.hostplan, pure), report the plan, apply it
change by change through the SSH adapter, reboot and wait when a kernel change needs it, read
the host again (the plan must now be empty), then run the deploy preflight as the deploy user.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.provision import assets, remote
from mur.provision.hostplan import Change, HostState, Plan, parse_state, plan, state_command
from mur.provision.reporter import QUIET, Reporter
from mur.provision.userdata import UserDataInputs, marker


@dataclass
class PrepareRequest:
    coords: remote.SSHCoords
    inputs: UserDataInputs
    check_only: bool = False
    trust_new_host: bool = False
    manifest: Path | None = None  # the capsule the preflight checks; default deploy/preflight/murmur.yaml
    reboot_timeout: float = 600.0
    preflight: bool = True


@dataclass
class PrepareResult:
    host: str
    deploy_user: str
    plan: Plan
    applied: list[str] = field(default_factory=list)
    rebooted: bool = False
    preflight: dict[str, Any] | None = None
    deploy_command: str = ""
    check_only: bool = False
    elapsed: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.applied)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "deploy_user": self.deploy_user, "check": self.check_only,
                **self.plan.to_dict(), "applied": self.applied, "changed": self.changed, "rebooted": self.rebooted,
                "preflight": self.preflight, "deploy_command": self.deploy_command, "elapsed": round(self.elapsed, 1)}


def read_state(target, user: str) -> HostState:
    script = assets.read_text("host/mur-host.sh")
    res = remote.run(target, state_command(user, script), what="read the host's state", timeout=120)
    return parse_state(res.stdout)


def _apply(target, change: Change, inp: UserDataInputs) -> None:
    q = shlex.quote
    user = inp.deploy_user
    if change.id in ("packages", "cmdline", "reboot") or change.id.startswith("kernel-"):
        # the script may not be installed yet (packages come first): feed it on stdin
        script = assets.read_text("host/mur-host.sh")
        if change.id == "packages":
            remote.run(target, f"sh -s -- apply packages <<'MUR_HOST_SH'\n{script}\nMUR_HOST_SH", what=change.what,
                       timeout=1200)
        else:
            remote.run(target, f"sh {assets.HOST_SCRIPT} apply --kernel {q(inp.kernel)} {q(change.id)}",
                       what=change.what, timeout=1800)
    elif change.id == "group":
        remote.run(target, f"groupadd --system {assets.GROUP}", what=change.what)
    elif change.id == "user":
        remote.run(target, f"useradd --create-home --shell /bin/bash --groups {assets.GROUP} {q(user)} && "
                           f"passwd --lock {q(user)} >/dev/null", what=change.what)
    elif change.id == "user-group":
        remote.run(target, f"usermod --append --groups {assets.GROUP} {q(user)}", what=change.what)
    elif change.id == "keys":
        lines = "".join(k + "\n" for k in inp.ssh_authorized_keys)
        # append only the missing lines; keep what the user already had
        remote.run(target, (
            f"h=$(getent passwd {q(user)} | cut -d: -f6) && install -d -m 700 -o {q(user)} -g {q(user)} \"$h/.ssh\" && "
            f"touch \"$h/.ssh/authorized_keys\" && printf '%s' {q(lines)} | while IFS= read -r k; do "
            f"b=$(echo \"$k\" | awk '{{print $1\" \"$2}}'); grep -qF \"$b\" \"$h/.ssh/authorized_keys\" || "
            f"echo \"$k\" >> \"$h/.ssh/authorized_keys\"; done && chown {q(user)}:{q(user)} \"$h/.ssh/authorized_keys\" && "
            f"chmod 600 \"$h/.ssh/authorized_keys\""), what=change.what)
    elif change.id.startswith("file:"):
        dest = change.id[5:]
        f = next(h for h in assets.HOST_FILES if h.dest == dest)
        check = "visudo -cqf {path}" if f is assets.SUDOERS else None
        remote.install_file(target, f.data(), dest, f.mode, check_cmd=check)
        if dest.endswith(".conf") and "/systemd/" in dest:
            remote.run(target, "systemctl daemon-reload", check=False, what="systemctl daemon-reload")
    elif change.id == "marker":
        remote.install_file(target, marker(inp).encode(), assets.MARKER, 0o644)
    else:  # pragma: no cover - hostplan and this switch are kept in step by tests
        raise MurError("E-PROV-002", f"unknown change {change.id}")


def prepare(req: PrepareRequest, reporter: Reporter = QUIET) -> PrepareResult:
    """Plan, then (unless check_only) apply, reboot if needed, re-check and preflight."""
    t0 = time.monotonic()
    inp = req.inputs
    inp.validate()
    coords = req.coords
    with reporter.step(f"connect {coords.user}@{coords.host}"):
        target = remote.connect(coords, trust_new_host=req.trust_new_host, note=reporter.note)
    try:
        if not remote.has_root(target):
            raise MurError("E-PROV-002", f"{coords.user}@{coords.host} is neither root nor has passwordless sudo",
                           "connect as root (--ssh-user root) or as a user with passwordless sudo")
        with reporter.step("read the host"):
            state = read_state(target, inp.deploy_user)
            the_plan = plan(state, inp)
        result = PrepareResult(coords.host, inp.deploy_user, the_plan, check_only=req.check_only)
        result.deploy_command = deploy_command(coords, inp.deploy_user)
        if the_plan.refused:
            raise MurError("E-PROV-001", f"{coords.host}: {the_plan.refused}",
                           "mur host prepare supports Debian 12 (bookworm) on x86_64 with systemd")
        reporter.plan(the_plan)
        if req.check_only:
            result.elapsed = time.monotonic() - t0
            return result
        for change in the_plan.changes:
            with reporter.step(change.what):
                _apply(target, change, inp)
            result.applied.append(change.id)
        if the_plan.reboot:
            with reporter.step(f"reboot {coords.host} and wait for it"):
                target = remote.reboot_and_wait(coords, target, timeout=req.reboot_timeout, note=reporter.note)
            result.rebooted = True
        if result.applied:
            with reporter.step("check again"):
                again = plan(read_state(target, inp.deploy_user), inp)
            if again.changes or again.refused:
                left = "; ".join(c.what for c in again.changes) or again.refused
                raise MurError("E-PROV-002", f"{coords.host} still needs changes after prepare: {left}",
                               "rerun with MUR_DEBUG=1 and check the host's logs")
    finally:
        target.close()
    if req.preflight:
        manifest = req.manifest or assets.path("preflight/murmur.yaml")
        report = remote.preflight(coords, inp.deploy_user, manifest, reporter)
        result.preflight = report.to_dict()
        if not report.ok:
            reporter.note(report.render().rstrip())
            report.raise_if_failed()
    result.elapsed = time.monotonic() - t0
    return result


def deploy_command(coords: remote.SSHCoords, user: str) -> str:
    return "mur deploy " + " ".join(shlex.quote(a) for a in coords.deploy_args(user))
