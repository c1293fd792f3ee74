"""The mur supervisor as the init system (no systemd: containers, minimal VMs, this machine).

`mur supervise run` (mur.deploy.supervisor) is started detached by the shell (`setsid -f`, stdio to
the service log; through `sudo -n` for a non-root user) and owns a cgroup subtree for the service.
Every command here goes over the shell and never trusts a recorded pid it has not checked
(mur.deploy.procid: start time + boot id), so a pid reused after an unclean restart is never
reported alive or signalled. A boot hook (cron @reboot) brings the service back after a reboot
where the host has cron; preflight decides which.
"""

from __future__ import annotations

import shlex

from mur.deploy.apply import symlink_command
from mur.deploy.procid import SH_ALIVE
from mur.deploy.steps import Layout, Run, ServiceConfig, ServiceState, Step

STOP_WAIT_TENTHS = 600  # 60 s for the supervisor to stop the service and clean its cgroup
START_WAIT_TENTHS = 300  # 30 s for a new supervisor to record itself (its interpreter's start; slow in a TCG VM)
HOLD_WAIT_SECS = 90  # the longest a stop waits for another's flock on the run directory (hold_run_dir)


def hold_run_dir(lay: Layout) -> str:
    """This shell holds an flock on the deployment's run directory (fd 7) until it exits.

    A stop (or restart) goes on when the link of the command that sent it dies; the lock holder of
    that command (mur.deploy.lock) waits for this flock before it lets the deployment's lock go, so
    no other command starts while it runs. A directory opened read-only: nothing is created, and
    nothing a planted link could make root write. Best effort: no directory, no flock, no wait."""
    q = shlex.quote
    return (f"{{ [ -d {q(lay.run_dir)} ] && command exec 7<{q(lay.run_dir)} && "
            f"flock -w {HOLD_WAIT_SECS} 7; }} 2>/dev/null")


def start_command(lay: Layout, hold: bool = True) -> str:
    """Start the supervisor of `current` unless the recorded one still runs (no runtime start to fork).

    Under the run directory's flock (hold_run_dir; `hold=False` when the caller holds it already,
    as a restart does), and it returns only once a supervisor has recorded itself (or
    START_WAIT_TENTHS passed: one that failed at its start): a supervisor is invisible to a stop until its pid file is
    written, ~1-3 s after the fork, and a stop or start in that window (the undo of a deploy whose
    link was cut after its restart went out) found none, removed the pid file the new one was
    writing and started another; the first served on with no pid file, so status said nothing
    runs and the next stop killed its service without stopping it. The supervisor gets no fd 7: it
    must not hold the flock for its life."""
    q = shlex.quote
    held = f"{hold_run_dir(lay)}; " if hold else ""
    return (f"{held}{SH_ALIVE}; if mur_alive {q(lay.supervisor_pid)}; then echo already running; else "
            f"rm -f {q(lay.supervisor_pid)} {q(lay.state_file)}; cd / && MUR_RUNTIME_DIR={q(lay.runtime_dir)} "
            f"setsid -f {q(lay.current + '/mur')} supervise run --spec {q(lay.current + '/service.json')} "
            f"</dev/null >>{q(lay.log_file)} 2>&1 7<&-; mur_i=0; "
            f"while [ $mur_i -lt {START_WAIT_TENTHS} ] && ! mur_alive {q(lay.supervisor_pid)}; do "
            "sleep 0.1; mur_i=$((mur_i+1)); done; fi")


def stop_command(lay: Layout) -> str:
    """SIGTERM the supervisor (it stops the service, cleans its cgroup and exits); then make sure.

    Whatever survives (a supervisor killed with SIGKILL leaves its service running) is found
    through the identity-checked child and smoke pid files and the supervisor's own cgroups
    (directories ending in this deployment's id), never through a bare pid.
    """
    q = shlex.quote
    return (
        f"{hold_run_dir(lay)}; {SH_ALIVE}; if mur_alive {q(lay.supervisor_pid)}; then p=$mur_pid; s=$mur_start; kill -TERM $p; i=0; "
        f"while mur_same $p $s && [ $i -lt {STOP_WAIT_TENTHS} ]; do sleep 0.1; i=$((i+1)); done; "
        "mur_same $p $s && kill -KILL $p; fi; "
        f"{_kill_recorded(lay.child_pid, smoke_parent_pid(lay), smoke_pid(lay))}; "
        f"for d in $(cat {q(lay.cgroups_file)} 2>/dev/null); do case \"$d\" in /sys/fs/cgroup/*/{lay.dep_id}) ;; "
        "*) continue;; esac; [ -d \"$d\" ] || continue; "
        "for p in $(find \"$d\" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL $p 2>/dev/null; done; "
        "sleep 0.2; find \"$d\" -depth -type d -exec rmdir {} + 2>/dev/null; done; "
        f"rm -f {q(lay.supervisor_pid)} {q(lay.child_pid)} {q(smoke_pid(lay))} {q(smoke_parent_pid(lay))}; true")


def restart_command(lay: Layout) -> str:
    """Stop, then start, as one remote command: a link that dies between two commands used to leave
    nothing serving until the next deploy. sshd signals nothing to a command without a terminal when
    its client goes, and the stop writes only to /dev/null (a write to a dead channel is a SIGPIPE
    that would end the shell before the start): once sent, the restart runs to its end."""
    return f"{{ {stop_command(lay)}; }} >/dev/null 2>&1; {start_command(lay, hold=False)}"


def smoke_pid(lay: Layout) -> str:
    return f"{lay.run_dir}/smoke.pid"


def smoke_parent_pid(lay: Layout) -> str:
    """`mur supervise smoke` itself (it records itself first: a stop kills it before its child)."""
    return f"{lay.run_dir}/smoke-parent.pid"


def _kill_recorded(*pidfiles: str) -> str:
    """SIGKILL the process group of each recorded process that is still the one recorded."""
    files = " ".join(shlex.quote(f) for f in pidfiles)
    return (f"for f in {files}; do if mur_alive \"$f\"; then "
            "kill -KILL -- -$mur_pid 2>/dev/null || kill -KILL $mur_pid 2>/dev/null; fi; done")


def stop_smoke_command(lay: Layout) -> str:
    """Kill a smoke start a dropped connection left running (the serving release is not touched)."""
    return (f"{SH_ALIVE}; {_kill_recorded(smoke_parent_pid(lay), smoke_pid(lay))}; "
            f"rm -f {shlex.quote(smoke_pid(lay))} {shlex.quote(smoke_parent_pid(lay))}; true")


CRON_MARK = "# mur:"


def cron_install(lay: Layout) -> str:
    q = shlex.quote
    line = f"@reboot /bin/sh {lay.boot_script} {CRON_MARK}{lay.dep_id}"
    return (f"( crontab -l 2>/dev/null | grep -vF {q(CRON_MARK + lay.dep_id)}; echo {q(line)} ) | crontab -")


def cron_remove(lay: Layout) -> str:
    q = shlex.quote
    return (f"if command -v crontab >/dev/null 2>&1 && crontab -l 2>/dev/null | grep -qF {q(CRON_MARK + lay.dep_id)}; "
            f"then crontab -l | grep -vF {q(CRON_MARK + lay.dep_id)} | crontab -; fi; true")


def boot_script(lay: Layout, sudo: bool) -> bytes:
    """What the boot hook runs: the same start command as `mur deploy start`."""
    cmd = start_command(lay)
    if sudo:
        cmd = f"sudo -n sh -c {shlex.quote(cmd)}"
    return f"#!/bin/sh\n# written by mur deploy: start {lay.dep_id} after a reboot\n{cmd}\n".encode()


class Supervisor:
    name = "supervisor"

    def start(self, lay: Layout, sudo: bool, restart: bool = False, switch: str | None = None) -> list[Step]:
        # the switch of `current` goes with the (re)start: once sent, both run to their end, so a
        # link lost between them can no longer leave `current` naming a release that does not serve
        first = symlink_command(switch, lay.current) if switch else ""
        if restart:
            return [Run(restart_command(lay), sudo=sudo, label="restart supervisor", first=first)]
        return [Run(start_command(lay), sudo=sudo, label="start supervisor", first=first)]

    def stop(self, lay: Layout, sudo: bool) -> list[Step]:
        return [Run(stop_command(lay), sudo=sudo, check=False, label="stop supervisor")]

    def remove(self, lay: Layout, sudo: bool) -> list[Step]:
        # the crontab belongs to the deploy user: no sudo
        return [Run(cron_remove(lay), check=False, label="remove boot hook")]

    def install_boot(self, lay: Layout, svc: ServiceConfig, sudo: bool) -> list[Step]:
        if svc.boot != "cron":
            return []
        return [Run(cron_install(lay), label="install boot hook")]

    def status(self, lay: Layout, sudo: bool) -> Run:
        q = shlex.quote
        return Run(f"{SH_ALIVE}; cat {q(lay.state_file)} 2>/dev/null; echo; "
                   f"if mur_alive {q(lay.supervisor_pid)}; then echo @@alive=$mur_pid; fi; true",
                   check=False, label="service status")

    def parse_status(self, out: str) -> ServiceState:
        import json

        alive = None
        body = []
        for line in out.splitlines():
            if line.startswith("@@alive="):
                alive = int(line.split("=", 1)[1])
            else:
                body.append(line)
        try:
            st = json.loads("\n".join(body).strip() or "null")
        except ValueError:
            st = None
        if not isinstance(st, dict):  # no state yet: not started, or just starting
            return ServiceState("absent" if alive is None else "starting", running=alive is not None, pid=alive)
        state = str(st.get("state") or "unknown")
        if alive is None and state not in ("stopped", "exited"):
            state = "dead"  # the recorded supervisor is gone (or the pid now belongs to someone else)
        running = alive is not None and state in ("running", "starting", "backoff")
        restarts = int(st.get("restarts") or 0)
        last = st.get("last_exit")
        return ServiceState(
            state=state, running=running, ready=running and state == "running" and bool(st.get("url")),
            exited=alive is None, restarts=restarts, pid=alive,
            detail=(("child_pid", str(st.get("child_pid") or "")), ("release", str(st.get("release") or ""))),
            looping=running and (state == "backoff" or (state == "starting" and restarts > 0)),
            last_exit=int(last) if isinstance(last, int) else None)

    def logs(self, lay: Layout, lines: int, follow: bool, sudo: bool) -> Run:
        # the log file belongs to the deploy user: no sudo
        return Run(f"tail -n {int(lines)} {'-F ' if follow else ''}{shlex.quote(lay.log_file)}", check=False,
                   label="service log")


SUPERVISOR = Supervisor()
