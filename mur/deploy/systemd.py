"""The systemd unit of a deployment: one unit per deployment, delegated cgroup, journal logs.

Why these settings:
  * ``Delegate=memory pids cpu io`` hands the unit's cgroup subtree to the runtime, which creates a
    per-session child with the capsule's aggregate limits for shell tools (upstream documents the
    same drop-in by hand; deploy writes it).
  * ``Restart=`` is ``on-failure`` for a long-lived capsule (``queue`` + ``sleep``); a capsule whose
    lifecycle exits after each task gets ``always`` so the URL keeps answering (a fresh process per
    task). ``StartLimitIntervalSec=0`` + ``RestartSec`` give backoff without systemd giving up.
  * ``MURMUR_A2A_TIMEOUT_SECS=0``: a service waits for tasks forever.
  * ``KillMode=mixed``: SIGTERM to `mur run` only (it lets a running task finish within its grace
    period), SIGKILL to whatever is left afterwards.
  * ``ExecStart`` goes through ``current``: switching the symlink and restarting swaps bundle,
    capsule and config together (that is what rollback relies on).
"""

from __future__ import annotations

import shlex

from mur.deploy.plan import Layout, ServiceConfig, run_argv


def _systemd_quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-:=@+," for c in arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(lay: Layout, svc: ServiceConfig, capsule: str = "") -> str:
    """The unit file text for one deployment."""
    argv = run_argv(lay.current, svc.port, svc.bind, svc.run_args)
    exec_start = " ".join(_systemd_quote(a.replace("%", "%%")) for a in argv)
    lines = [
        "# written by mur deploy; removed by `mur deploy destroy`",
        "[Unit]",
        f"Description=mur capsule {capsule or lay.dep_id} ({lay.dep_id})",
        "After=network.target",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=simple",
    ]
    if svc.user:
        lines.append(f"User={svc.user}")
    lines += [
        f"WorkingDirectory={lay.current}",
        f"Environment=HOME={_systemd_quote(lay.home)}",
        "Environment=MURMUR_A2A_TIMEOUT_SECS=0",
        f"Environment=MUR_RUNTIME_DIR={_systemd_quote(lay.runtime_dir)}",
        f"EnvironmentFile=-{lay.current}/env",
        f"ExecStart={exec_start}",
        f"Restart={svc.restart}",
        "RestartSec=2s",
        "Delegate=memory pids cpu io",
        f"MemoryMax={svc.memory_bytes}",
        f"TasksMax={svc.tasks_max}",
        "KillMode=mixed",
        "TimeoutStopSec=20s",
        "StandardOutput=journal",
        "StandardError=journal",
        f"SyslogIdentifier=mur-{lay.dep_id[4:16]}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def status_command(lay: Layout) -> str:
    """`systemctl show` of the properties `mur deploy status` reports."""
    return (f"systemctl show {shlex.quote(lay.unit_name)} -p ActiveState -p SubState -p MainPID "
            f"-p NRestarts -p ExecMainStatus -p LoadState -p InvocationID --no-pager")


def ready_command(invocation_id: str) -> str:
    """Succeeds once this run of the unit printed `mur run`'s startup JSON line to the journal."""
    return (f"journalctl _SYSTEMD_INVOCATION_ID={shlex.quote(invocation_id)} -o cat --no-pager "
            f"| grep -q '^{{\"url\"'")


def parse_show(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def logs_command(lay: Layout, lines: int = 200, follow: bool = False) -> str:
    return (f"journalctl -u {shlex.quote(lay.unit_name)} --no-pager -o cat -n {int(lines)}"
            + (" -f" if follow else ""))
