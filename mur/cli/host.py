"""`mur host prepare`: make an existing Debian 12 host ready for `mur deploy` (over SSH).

    mur host prepare --host H [--ssh-user U] [--deploy-user NAME] [--kernel keep|6.1|6.12]
                     [--authorized-key PUB]... [--check] [--json]
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from mur.cli.render import emit
from mur.humanize import plain


def reporter(enabled: bool = True):
    """The CLI's step reporter (steps and notes on stderr) plus the plan, printed before any change."""
    from mur.cli.render import StepReporter

    class _Reporter(StepReporter):
        def line(self, text: str, style: str | None = None) -> None:
            if enabled:
                super().line(text, style)

        def plan(self, plan) -> None:  # noqa: ANN001 - mur.provision.hostplan.Plan
            if not plan.changes:
                self.line("  nothing to change: the host is prepared", "green")
                return
            self.line(f"  plan: {len(plan.changes)} change(s)" + (", then a reboot" if plan.reboot else ""))
            for c in plan.changes:
                self.line(f"    + {c.what}" + ("  (needs a reboot)" if c.reboot else ""))

    return _Reporter()


def _public_keys(keys: List[str], ssh_key: Optional[Path]) -> tuple[str, ...]:
    from mur.errors import MurError

    out = []
    for k in keys:
        p = Path(k).expanduser()
        out.append(p.read_text().strip() if p.is_file() else k.strip())
    if not out:
        candidates = [Path(str(ssh_key.expanduser()) + ".pub")] if ssh_key else []
        candidates += [Path.home() / ".ssh" / n for n in ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise MurError("E-DEPLOY-001", "no public key to authorize for the deploy user",
                           "pass --authorized-key ~/.ssh/id_ed25519.pub (or the key line itself)")
        out.append(found.read_text().strip())
    return tuple(out)


def _human(r: dict) -> str:
    if r["check"]:
        head = "prepared: nothing to change" if not r["changes"] else f"not prepared: {len(r['changes'])} change(s) needed"
    else:
        head = ("prepared: nothing changed" if not r["changed"] else
                f"prepared: {len(r['applied'])} change(s) applied" + (", rebooted" if r["rebooted"] else ""))
    lines = [f"{r['host']}: {head}"]
    pf = r.get("preflight")
    if pf:
        lines.append(f"  preflight  {'ok' if pf['ok'] else 'FAILED'} as {r['deploy_user']}: Landlock ABI "
                     f"{plain(pf.get('landlock_abi'))}, cgroup {plain(pf.get('cgroup_mode'))}, init {plain(pf.get('init'))}")
    lines.append(f"  deploy     {r['deploy_command']}")
    return "\n".join(lines) + "\n"


def prepare(
    host: str = typer.Option(..., "--host", help="The host to prepare: HOST or USER@HOST:PORT."),
    ssh_user: Optional[str] = typer.Option(None, "--ssh-user", show_default=False,
                                           help="Who connects: root (the default), or a user with passwordless sudo."),
    ssh_port: Optional[int] = typer.Option(None, "--ssh-port", min=1, max=65535, show_default=False,
                                           help="SSH port (default 22)."),
    ssh_key: Optional[Path] = typer.Option(None, "--ssh-key", help="Private key (default: agent, ~/.ssh/id_*)."),
    known_hosts: Optional[Path] = typer.Option(None, "--known-hosts", help="known_hosts file (default ~/.ssh/known_hosts)."),
    trust_new_host: bool = typer.Option(False, "--trust-new-host", help="Record an unknown host key (trust on first use)."),
    deploy_user: str = typer.Option("mur", "--deploy-user", help="The non-root user mur deploy will log in as."),
    authorized_key: List[str] = typer.Option([], "--authorized-key",
                                             help="Public key (file or line) for the deploy user; default: --ssh-key's .pub."),
    kernel: str = typer.Option("keep", "--kernel", help="keep | 6.1 | 6.12 (Landlock ABI 2 / 6)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest", "-m",
                                            help="Capsule to run the final preflight for (default: a shell-tool capsule)."),
    no_preflight: bool = typer.Option(False, "--no-preflight", help="Skip the final deploy preflight."),
    reboot_timeout: float = typer.Option(600.0, "--reboot-timeout", help="Seconds to wait for the host after a reboot."),
    check: bool = typer.Option(False, "--check", help="Only show what would change (exit 3 when something would)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line on stdout."),
) -> None:
    """Plan, apply (idempotent), reboot if a kernel change needs it, then run the deploy preflight."""
    from mur.provision.prepare import PrepareRequest, prepare as run
    from mur.deploy.targets.address import ssh_coordinates
    from mur.provision.remote import SSHCoords
    from mur.provision.userdata import KERNELS, UserDataInputs

    if kernel not in KERNELS:
        raise typer.BadParameter(f"'{kernel}' is not one of: {', '.join(KERNELS)}", param_hint="--kernel")
    address, user, port = ssh_coordinates(host, ssh_user, ssh_port)
    coords = SSHCoords(address, user, port, str(ssh_key.expanduser().resolve()) if ssh_key else None,
                       str(known_hosts.expanduser().resolve()) if known_hosts else None)
    inputs = UserDataInputs(ssh_authorized_keys=_public_keys(authorized_key, ssh_key), deploy_user=deploy_user,
                            kernel=kernel)
    req = PrepareRequest(coords, inputs, check_only=check, trust_new_host=trust_new_host,
                         manifest=manifest.resolve() if manifest else None, reboot_timeout=reboot_timeout,
                         preflight=not (no_preflight or check))
    result = run(req, reporter())
    emit(result.to_dict(), json_out, _human)
    if check and result.plan.changes:
        raise typer.Exit(3)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Prepare hosts for mur deploy (deploy user, sudoers, cgroup delegation, kernel).",
                        no_args_is_help=True)
    group.command("prepare")(prepare)
    app.add_typer(group, name="host")
