"""systemd as the init system: one unit per deployment, delegated cgroup, journal logs, enabled
so it comes back after a reboot.

Why these settings:
  * ``Delegate=memory pids cpu io`` hands the unit's cgroup subtree to the runtime, which creates a
    per-session child with the capsule's aggregate limits for shell tools (upstream documents the
    same drop-in by hand; deploy writes it).
  * ``Restart=`` is ``on-failure`` for a long-lived capsule (``queue`` + ``sleep``); a capsule whose
    lifecycle exits after each task gets ``always`` so the URL keeps answering (a fresh process per
    task). ``StartLimitIntervalSec=0`` + ``RestartSec`` give backoff without systemd giving up.
  * ``ExecStartPre`` runs the release's prestart script (stale payloads, bounded past sessions).
  * ``KillMode=mixed``: SIGTERM to `mur run` only (it lets a running task finish within its grace
    period), SIGKILL to whatever is left afterwards.
  * Each release has its own unit naming that release's directory (not ``current``): a restart
    by ``Restart=`` after a crash runs the release that was serving, never one that `current`
    was switched to without a restart. A switch installs the unit of the release `current`
    now names and restarts it, so bundle, capsule, config and material change together.
"""

from __future__ import annotations

import shlex

from mur.deploy.init.service import service_env
from mur.deploy.runline import run_argv
from mur.deploy.steps import Layout, Run, ServiceConfig, ServiceState, Step, Symlink
from mur.digits import is_digits


def _quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-:=@+," for c in arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(lay: Layout, svc: ServiceConfig, capsule: str = "", release: str = "") -> str:
    """The unit file text of one release (`release`: its final directory)."""
    release = release or lay.current
    argv = run_argv(release, svc.port, svc.bind, svc.run_args)
    exec_start = " ".join(_quote(a.replace("%", "%%")) for a in argv)
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
    lines.append(f"WorkingDirectory={release}")
    lines += [f"Environment={_quote(f'{k}={v}'.replace('%', '%%'))}" for k, v in service_env(lay, svc, release).items()]
    lines += [
        f"EnvironmentFile=-{release}/env",
        f"ExecStartPre=/bin/sh {release}/prestart.sh",
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


class Systemd:
    name = "systemd"

    def start(self, lay: Layout, sudo: bool, restart: bool = False, switch: str | None = None) -> list[Step]:
        q = shlex.quote
        verb = "restart" if restart else "start"
        # the unit is installed from `current` (so is the root helper's `install-unit`): the switch is
        # its own command before it, and a link lost right after it leaves `current` ahead of what
        # serves until the next deploy (`diverged` in status; docs/deploy.md)
        return [
            *([Symlink(switch, lay.current)] if switch else []),
            Run(f"install -m 0644 {q(lay.current + '/' + lay.unit_name)} {q(lay.unit_path)} && systemctl daemon-reload",
                sudo=sudo, label="install unit", helper=("install-unit", lay.dep_id)),
            # enabled: the unit comes back after a reboot
            Run(f"systemctl enable --quiet {lay.unit_name} && systemctl {verb} {lay.unit_name}", sudo=sudo,
                label="start unit", helper=(verb, lay.dep_id)),
        ]

    def stop(self, lay: Layout, sudo: bool) -> list[Step]:
        return [Run(f"systemctl stop {lay.unit_name} 2>/dev/null; true", sudo=sudo, check=False, label="stop unit",
                    helper=("stop", lay.dep_id))]

    def remove(self, lay: Layout, sudo: bool) -> list[Step]:
        return [Run(f"systemctl disable --quiet {lay.unit_name} 2>/dev/null; rm -f {shlex.quote(lay.unit_path)}; "
                    f"systemctl daemon-reload; systemctl reset-failed {lay.unit_name} 2>/dev/null; true",
                    sudo=sudo, check=False, label="remove unit", helper=("remove", lay.dep_id))]

    def install_boot(self, lay: Layout, svc: ServiceConfig, sudo: bool) -> list[Step]:
        return []  # `systemctl enable` in start()

    def status(self, lay: Layout, sudo: bool) -> Run:
        u = shlex.quote(lay.unit_name)
        # ready: this invocation of the unit printed `mur run`'s startup JSON line to the journal
        # (deploy/host/mur-deploy-helper's `status` is the same command, for a helper host)
        return Run(f"systemctl show {u} -p ActiveState -p SubState -p MainPID -p NRestarts -p ExecMainStatus "
                   f"-p LoadState -p UnitFileState --no-pager; inv=$(systemctl show -p InvocationID --value {u}); "
                   "if [ -n \"$inv\" ] && journalctl _SYSTEMD_INVOCATION_ID=\"$inv\" -o cat --no-pager 2>/dev/null "
                   "| grep -q '^{\"url\"'; then echo READY=1; fi; true", sudo=sudo, check=False, label="service status",
                   helper=("status", lay.dep_id))

    def parse_status(self, out: str) -> ServiceState:
        props = {}
        for line in out.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                props[key.strip()] = value.strip()
        active = props.get("ActiveState") or "unknown"
        if props.get("LoadState") == "not-found":
            active = "absent"
        pid = int(props["MainPID"]) if is_digits(props.get("MainPID", "")) and props["MainPID"] != "0" else None
        restarts = int(props.get("NRestarts") or 0)
        sub = props.get("SubState", "")
        last = props.get("ExecMainStatus", "")
        return ServiceState(
            state=active, running=active in ("active", "activating", "reloading"),
            ready=active == "active" and props.get("READY") == "1",
            exited=active in ("failed", "inactive", "absent"), restarts=restarts, pid=pid,
            detail=(("sub_state", sub), ("enabled", props.get("UnitFileState", ""))),
            looping=sub == "auto-restart" or (active == "activating" and restarts > 0),
            last_exit=int(last) if is_digits(last.lstrip("-")) and (restarts or active != "active") else None)

    def logs(self, lay: Layout, lines: int, follow: bool, sudo: bool) -> Run:
        cmd = f"journalctl -u {shlex.quote(lay.unit_name)} --no-pager -o cat -n {int(lines)}" + (" -f" if follow else "")
        # the system journal needs privileges for a non-root user
        return Run(cmd, sudo=sudo, check=False, label="service log",
                   helper=("logs", lay.dep_id, str(int(lines)), *(("follow",) if follow else ())))


SYSTEMD = Systemd()
