"""rlimits: measure what the policy needs (uid baseline, inherited hard limits), apply in the child.

Limits are hard (cur == max): an unprivileged process may raise a soft limit up to the hard one,
so a soft-only cap is advisory against a hostile tool. RLIMIT_NPROC counts every task (threads
included) whose real uid matches, machine-wide, hence "baseline + headroom" (spec, Host resource
limits); it is also ignored for uid 0, which is one reason the child drops to an unprivileged uid.
"""

from __future__ import annotations

import os
import resource

from mur.digits import is_digits

NAMES = {
    "NPROC": resource.RLIMIT_NPROC,
    "NOFILE": resource.RLIMIT_NOFILE,
    "FSIZE": resource.RLIMIT_FSIZE,
    "CPU": resource.RLIMIT_CPU,
    "AS": resource.RLIMIT_AS,
    "CORE": resource.RLIMIT_CORE,
}


def inherited_hard_limits() -> dict[str, int]:
    """This process's hard limits (RLIM_INFINITY = -1): values above them are clamped (spec)."""
    return {name: resource.getrlimit(res)[1] for name, res in NAMES.items()}


def uid_task_count(uid: int, proc: str = "/proc") -> int:
    """Tasks (processes and their threads) whose real uid is ``uid`` -- what RLIMIT_NPROC counts."""
    total = 0
    try:
        entries = os.listdir(proc)
    except OSError:
        return 0
    for entry in entries:
        if not is_digits(entry):
            continue
        real_uid = threads = None
        try:
            with open(os.path.join(proc, entry, "status")) as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        real_uid = int(line.split()[1])
                    elif line.startswith("Threads:"):
                        threads = int(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            continue
        if real_uid == uid:
            total += threads or 1
    return total


def apply(limits: tuple[tuple[str, int], ...]) -> None:
    """Child side: set every limit as hard (cur == max). Lowering is always allowed."""
    for name, value in limits:
        resource.setrlimit(NAMES[name], (value, value))
