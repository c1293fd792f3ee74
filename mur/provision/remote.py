"""The one place provisioning touches mur.deploy: SSH connections (same host-key rules as deploy),
commands, uploads, and the deploy preflight. Kept in one module so the calls can be re-pointed
when mur.deploy's layout changes.

Uses: mur.deploy.targets.TargetSpec + connect (SSHTarget: known_hosts verification,
--trust-new-host, retries), Target.run / put_file / is_root / close, mur.deploy.request.DeployRequest
and mur.deploy.operations.check (the `mur deploy --check` preflight), mur.deploy.preflight.Report
(its result).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError


@dataclass(frozen=True)
class SSHCoords:
    host: str
    user: str = "root"
    port: int = 22
    key_file: str | None = None
    known_hosts: str | None = None

    def spec(self, user: str | None = None):
        from mur.deploy.targets import TargetSpec

        return TargetSpec("ssh", host=self.host, port=self.port, user=user or self.user, key_file=self.key_file,
                          known_hosts=self.known_hosts)

    def deploy_args(self, user: str) -> list[str]:
        """The `mur deploy` options that reach this host as `user`."""
        args = ["--host", self.host, "--ssh-user", user]
        if self.port != 22:
            args += ["--ssh-port", str(self.port)]
        if self.key_file:
            args += ["--ssh-key", self.key_file]
        if self.known_hosts:
            args += ["--known-hosts", self.known_hosts]
        return args


def connect(coords: SSHCoords, *, trust_new_host: bool = False, note: Callable[[str], None] | None = None,
            budget: float | None = None, user: str | None = None):
    """A connected deploy Target (host key verified against known_hosts, as for mur deploy)."""
    from mur.deploy.targets import connect as deploy_connect

    return deploy_connect(coords.spec(user), trust_new_host=trust_new_host, note=note, connect_budget=budget)


def run(target, cmd: str, *, root: bool = True, check: bool = True, timeout: float | None = 600,
        what: str = "") -> Any:
    """Run under sh on the host, as root (through `sudo -n` when the SSH user is not root)."""
    return target.run(cmd, sudo=root, check=check, timeout=timeout, what=what)


def has_root(target) -> bool:
    return target.can_elevate_shell()  # prepare's steps run through `sudo -n sh -c`


def install_file(target, data: bytes, dest: str, mode: int, *, check_cmd: str | None = None) -> None:
    """Upload to a private temp dir as the SSH user, optionally check it, then install as root:root."""
    q = shlex.quote
    tmpdir = target.run("mktemp -d /tmp/mur-prepare.XXXXXX", what="mktemp").stdout.strip()
    tmp = f"{tmpdir}/file"
    try:
        target.put_file(data, tmp, 0o600)
        if check_cmd:
            run(target, check_cmd.format(path=q(tmp)), what=f"check {dest}")
        run(target, f"mkdir -p {q(str(Path(dest).parent))} && install -m {mode:o} -o root -g root {q(tmp)} {q(dest)}",
            what=f"install {dest}")
    finally:
        target.run(f"rm -rf {q(tmpdir)}", sudo=not target.is_root, check=False)


def boot_id(target) -> str:
    return target.run("cat /proc/sys/kernel/random/boot_id", check=False).stdout.strip()


def reboot_and_wait(coords: SSHCoords, target, *, timeout: float, note: Callable[[str], None]):
    """Reboot the host, wait until it answers SSH with a new boot id; returns the new Target."""
    before = boot_id(target)
    run(target, "nohup sh -c 'sleep 1; systemctl reboot' >/dev/null 2>&1 &", check=False, what="reboot")
    target.close()
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        time.sleep(3)
        try:
            t = connect(coords, budget=min(30.0, max(1.0, deadline - time.monotonic())))
        except MurError as exc:
            if exc.code == "E-DEPLOY-009":
                raise
            last = exc.message
            continue
        now = boot_id(t)
        # A host still booting may answer SSH before a login gets its full session (seen under emulation:
        # an empty $HOME), which the checks that follow need: wait for one too.
        if now and now != before and t.run('printf %s "$HOME"', check=False).stdout.startswith("/"):
            return t
        t.close()
        last = "still the old boot" if now == before else "the new boot's login is not ready yet"
    raise MurError("E-PROV-002", f"{coords.host} did not come back within {timeout:.0f}s after the reboot: {last}",
                   "check the host's console; rerun mur host prepare once it is up")


def preflight(coords: SSHCoords, user: str, manifest: Path, progress) -> Any:
    """`mur deploy --check` as the deploy user: returns mur.deploy.preflight.Report."""
    from mur.deploy.operations import check
    from mur.deploy.request import DeployRequest

    return check(DeployRequest(manifest=manifest, target=coords.spec(user)), progress)
