"""Process identity: a recorded pid is trusted only while it is still the same process.

After an unclean stop (power loss, a killed container) the pid in `run/supervisor.pid` can belong
to an unrelated process. A pid file therefore holds `<pid> <start time> <boot id>`: the start time
is field 22 of /proc/<pid>/stat (clock ticks since boot, fixed for the life of a process) and the
boot id is /proc/sys/kernel/random/boot_id. Both must match before anything reports the process
alive or sends it a signal; a pid reused after a reboot or a container restart never matches.

The same check exists twice by necessity, once for each side that reads the files: here in Python
(the supervisor on the target) and as the `mur_alive` shell function (commands deploy sends over
SSH, which must not start the runtime). tests/deploy/test_deploy_procid.py holds them equal.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from mur.digits import is_digits

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ") "
    return text.rsplit(") ", 1)[-1].split()


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat, or None when there is no such (live) process."""
    fields = _stat_fields(pid)
    if not fields or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def boot_id() -> str:
    try:
        return Path(BOOT_ID).read_text().strip()
    except OSError:
        return ""


def identity(pid: int) -> str | None:
    """`<pid> <start time> <boot id>` of a live process."""
    start = start_time(pid)
    return None if start is None else f"{pid} {start} {boot_id()}"


def write_pidfile(path: Path | str, pid: int) -> None:
    """Record `pid` with its identity (atomic: a reader sees the old line or the new one)."""
    ident = identity(pid)
    if ident is None:
        return
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(ident + "\n")
    os.replace(tmp, path)


def recorded_pid(path: Path | str) -> int | None:
    """The pid in a pid file if it is still the process that was recorded, else None."""
    try:
        parts = Path(path).read_text().split()
    except OSError:
        return None
    if len(parts) != 3 or not is_digits(parts[0]):
        return None
    pid, start, boot = int(parts[0]), parts[1], parts[2]
    return pid if boot == boot_id() and start_time(pid) == start else None


def remove_pidfile(path: Path | str) -> None:
    with contextlib.suppress(OSError):
        Path(path).unlink()


# `mur_same PID START`: PID is a live process that started at START (field 22 of its stat; after
# `set -- START <stat fields from 3>` that is the 21st). `mur_alive FILE`: FILE records a process
# that is still the one recorded (same boot, same start); sets $mur_pid and $mur_start.
# POSIX sh only: minbase targets have no procps.
SH_ALIVE = (
    "mur_same() { _mf=$(sed 's/.*) //' /proc/$1/stat 2>/dev/null) || return 1; set -- \"$2\" $_mf; "
    "case \"$2\" in Z|X|'') return 1;; esac; _mw=$1; shift 20; [ \"$1\" = \"$_mw\" ]; }; "
    "mur_alive() { mur_pid=; mur_start=; set -- $(cat \"$1\" 2>/dev/null); [ $# -eq 3 ] || return 1; "
    "case \"$1\" in ''|*[!0-9]*) return 1;; esac; "
    "[ \"$3\" = \"$(cat " + BOOT_ID + " 2>/dev/null)\" ] || return 1; "
    "mur_same \"$1\" \"$2\" || return 1; mur_pid=$1; mur_start=$2; }"
)
