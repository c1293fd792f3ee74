"""`mur vm`: local Debian 12 VMs under qemu, prepared as mur deploy hosts by deploy/'s user-data.

    mur vm create [--name N] [--kernel 6.1|6.12] [--deploy-user U] [--bare | --user-data FILE [--ssh-key KEY]] [--json]
    mur vm image [--kernel 6.1|6.12]               build (or reuse) the cached image only
    mur vm ls [--json] | mur vm ssh NAME [--root] [-- CMD...] | mur vm destroy NAME
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from mur.cli.render import emit

# Options more than one command takes, spelled once.
JsonOut = Annotated[bool, typer.Option("--json", help="One JSON line.")]
VmName = Annotated[str, typer.Argument(metavar="NAME")]


def _human_vm(m: dict) -> str:
    lines = [f"{m['name']}: kernel {m['extra'].get('kernel_release', m['kernel'])} (Landlock ABI {m['landlock_abi']}), "
             f"{m['accel'].upper()}, ssh on 127.0.0.1:{m['port']}, booted in {m['boot_seconds']}s",
             f"  ssh     mur vm ssh {m['name']}"]
    if m["deploy_user"]:
        lines.append(f"  deploy  {m['deploy_command']}")
    else:  # root only: prepare makes the deploy user (with this VM's key), then deploy as it
        lines.append(f"  prepare {m['prepare_command']}")
    return "\n".join(lines) + "\n"


def _human_ls(ms: list) -> str:
    if not ms:
        return "no VMs (mur vm create)\n"
    rows = [("NAME", "STATE", "KERNEL", "ABI", "SSH", "USER")]
    rows += [(m["name"], "running" if m["running"] else "stopped", m["extra"].get("kernel_release", m["kernel"]),
              str(m["landlock_abi"]), f"127.0.0.1:{m['port']}", m["deploy_user"] or "root") for m in ms]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


def _read_user_data(path: Path) -> str:
    from mur.errors import MurError

    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MurError("E-IO-001", f"cannot read the user-data {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    if not text.startswith(("#cloud-config", "#!", "Content-Type:", "#include", "#cloud-boothook")):
        raise MurError("E-VM-002", f"{path} is not cloud-init user-data (it starts with neither #cloud-config, #! "
                       "nor a MIME header)", "give the rendered user-data, e.g. terraform output -raw user_data > FILE")
    return text


def create(
    name: str = typer.Option("", "--name", help="VM name (default: vm-<random>)."),
    kernel: str = typer.Option("6.1", "--kernel", help="6.1 (Debian 12, Landlock ABI 2) or 6.12 (bookworm-security, ABI 6)."),
    deploy_user: str = typer.Option("mur", "--deploy-user", help="The non-root deploy user cloud-init creates."),
    authorized_key: List[str] = typer.Option([], "--authorized-key", help="Another public key (file or line) for it."),
    bare: bool = typer.Option(False, "--bare", help="Boot the unprepared image (root only), e.g. for mur host prepare."),
    user_data: Optional[Path] = typer.Option(None, "--user-data", help="Boot this cloud-init user-data instead of "
                                             "mur's (e.g. the terraform module's output), unchanged."),
    ssh_key: Optional[Path] = typer.Option(None, "--ssh-key", help="With --user-data: the private key it "
                                           "authorizes for --deploy-user (else the VM is root only)."),
    memory: int = typer.Option(2048, "--memory", help="MiB of guest memory."),
    cpus: int = typer.Option(2, "--cpus", help="Guest CPUs."),
    accel: str = typer.Option("auto", "--accel", help="auto | kvm | tcg (auto: KVM when it works here)."),
    boot_timeout: float = typer.Option(600.0, "--boot-timeout", help="Seconds to wait for SSH and cloud-init."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line on stdout."),
) -> None:
    """Build the image once (debootstrap, cached), boot a VM, wait until it is a deploy host."""
    from mur.cli.host import reporter
    from mur.errors import MurError
    from mur.provision import image, machines

    if kernel not in image.KERNELS:
        raise typer.BadParameter(f"'{kernel}' is not one of: {', '.join(image.KERNELS)}", param_hint="--kernel")
    if user_data is not None and (bare or authorized_key):
        raise typer.BadParameter("the user-data decides who logs in: not with --bare or --authorized-key",
                                 param_hint="--user-data")
    if ssh_key is not None and user_data is None:
        raise typer.BadParameter("only with --user-data (mur's own user-data uses the VM's key)", param_hint="--ssh-key")
    text = _read_user_data(user_data) if user_data is not None else None
    if ssh_key is not None and not ssh_key.expanduser().is_file():
        raise MurError("E-IO-001", f"--ssh-key not found: {ssh_key}")
    keys = tuple(Path(k).expanduser().read_text().strip() if Path(k).expanduser().is_file() else k
                 for k in authorized_key)
    m = machines.create(machines.CreateRequest(name=name, kernel=kernel, deploy_user=deploy_user,
                                               authorized_keys=keys, prepare=not bare, memory_mb=memory, cpus=cpus,
                                               accel=accel, boot_timeout=boot_timeout, user_data=text,
                                               login_key=ssh_key), reporter())
    emit(m.to_dict(), json_out, _human_vm)


def image_cmd(kernel: str = typer.Option("6.1", "--kernel", help="6.1 or 6.12."),
              json_out: JsonOut = False) -> None:
    """Build (or find cached) the VM image for a kernel; prints its directory."""
    from mur.cli.host import reporter
    from mur.provision import image

    if kernel not in image.KERNELS:
        raise typer.BadParameter(f"'{kernel}' is not one of: {', '.join(image.KERNELS)}", param_hint="--kernel")
    img = image.ensure_image(image.ImageSpec(kernel=kernel), reporter())
    emit({"dir": str(img.dir), "kernel": kernel, "kernel_release": img.kernel_release,
          "landlock_abi": img.landlock_abi, "key": img.spec.key()}, json_out, lambda r: r["dir"] + "\n")


def ls(json_out: JsonOut = False) -> None:
    """List local VMs."""
    from mur.provision import machines

    emit([m.to_dict() for m in machines.list_machines()], json_out, _human_ls)


def ssh(ctx: typer.Context, name: VmName,
        root: bool = typer.Option(False, "--root", help="Log in as root (the image's key).")) -> None:
    """Open a shell in the VM (or run the command after --), host key pinned."""
    from mur.errors import MurError
    from mur.provision import machines

    m = machines.get(name)
    if not m.running():
        raise MurError("E-VM-002", f"{name} is not running", f"mur vm destroy {name} && mur vm create --name {name}")
    os.execvp("ssh", m.ssh_argv("root" if root else None, list(ctx.args), batch=bool(ctx.args)))


def destroy(name: VmName,
            json_out: JsonOut = False) -> None:
    """Power the VM off and delete it (its disk overlay, keys, seed)."""
    from mur.provision import machines

    emit(machines.destroy(name), json_out, lambda r: f"destroyed {r['name']}\n")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Local VMs (qemu) prepared as mur deploy hosts, for laptops and CI.", no_args_is_help=True)
    group.command("create")(create)
    group.command("image")(image_cmd)
    group.command("ls")(ls)
    group.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(ssh)
    group.command("destroy")(destroy)
    app.add_typer(group, name="vm")
