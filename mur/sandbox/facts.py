"""What ``ShellSandbox.start`` measures before it decides (``decide.SessionFacts``): the allowed
binaries and their closures, which network.allow hosts resolve, the session uid (leased here, as
root), the uid's tasks and the inherited hard limits, how granted paths resolve, the PATH's
directories, the host's memory, and which aggregate bound the host gives.
"""

from __future__ import annotations

import functools
import os
import stat
from typing import Any

from mur.sandbox import isolation, rlimits
from mur.sandbox.binaries import lookup_path, resolve
from mur.sandbox.decide import SessionFacts, host_path_dirs, memory_total
from mur.sandbox.probe import HostProbe
from mur.sandbox.viewplan import STAGED, measure_chain


def _staged(workdir: str) -> bool:
    """Does the host workdir hold the runtime's tools/ (a directory, never a link a tool left)?"""
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(workdir, STAGED)).st_mode)
    except OSError:
        return False


def gather(box: Any, probe: HostProbe) -> SessionFacts:
    """The facts for ``box`` (a ShellSandbox whose workdir exists): sets its binaries and uid lease."""
    linux = probe.os == "linux"
    is_root = linux and os.geteuid() == 0
    workdir = str(box.workdir)
    box.binaries = resolve(box.caps, box.host_env, workdir,
                           with_closure=linux and (probe.landlock_abi > 0 or probe.sealed), log=box.log)
    if is_root and box._lease is None:
        box._lease = isolation.lease_uid(box.session_id)
    run_as = (box._lease.uid, box._lease.gid) if box._lease is not None else None
    resolved = {e.host for e in box.network_allow if linux and box.resolve(e.host)}
    return SessionFacts(
        probe, workdir, is_root,
        readonly=box._readonly(),
        closures={b.name: b.closure for b in box.binaries.values() if b.closure},
        named={b.name: b.named for b in box.binaries.values() if b.named},
        resolves=resolved.__contains__,
        run_as=run_as,
        uid_tasks=0 if run_as is not None else rlimits.uid_task_count(os.getuid()),
        hard_limits=rlimits.inherited_hard_limits(),
        existing=os.path.exists,
        chains=functools.lru_cache(maxsize=None)(measure_chain),
        path_dirs=host_path_dirs(lookup_path(box.host_env, workdir, lambda _m: None)),
        memory_total=memory_total(),
        staged=_staged(workdir),
        aggregate=isolation.expected_aggregate(probe, box.caps),
    )
