"""The probe's check of ``sealed``: a composed root (mount namespace + pivot_root) and a session disk,
built in a holder child exactly as a session's are, then verified from outside.

Verified, through the holder's root as the runtime reaches it (``/proc/<holder>/root``):
* a path that exists on the host but is not granted (``/etc``, the probe's own directory's
  parent) does not exist in the view;
* the granted file is there and readable, the workdir is writable, and what is written there
  lands on the session disk, not in the host directory;
* the disk refuses a write past its ceiling (ENOSPC), so it is kernel-counted.
As root the disk is a loop-mounted ext4 image (``disk_loop``); if that fails, and for every other
uid, a tmpfs (``disk_tmpfs``). When the view cannot be built the reason names the blocker:
user namespaces disabled or restricted (with the sysctl that says so), no mount namespace, or the
step that failed.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

USERNS_KNOBS = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0",
     "unprivileged user namespaces are disabled host-wide (sysctl kernel.unprivileged_userns_clone=0)"),
    ("/proc/sys/user/max_user_namespaces", "0",
     "user namespaces are disabled host-wide (sysctl user.max_user_namespaces=0)"),
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
     "unprivileged user namespaces are restricted by AppArmor (sysctl "
     "kernel.apparmor_restrict_unprivileged_userns=1): run mur as root, or give it an AppArmor profile that "
     "allows userns (upstream's mur-sealed)"),
)
PROBE_LIMIT = 4 << 20


@dataclass(frozen=True)
class ViewAnswer:
    sealed: bool
    reason: str | None  # why not sealed
    disk_loop: bool
    disk_tmpfs: bool
    disk_reason: str | None  # why no kernel-counted disk at all (or no loop disk, as root)


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read(64).strip()
    except OSError:
        return None


def userns_blocker() -> str:
    """Why an unprivileged user namespace is refused here, as precisely as the host says."""
    for path, value, text in USERNS_KNOBS:
        if _read(path) == value:
            return text
    return "unprivileged user namespaces could not be created here (a container's seccomp profile or an LSM refuses them)"


def check(root: bool, userns: bool) -> ViewAnswer:
    """Build and verify a composed root with a session disk (see the module docstring)."""
    if not root and not userns:
        why = f"sealed needs a mount namespace of the session's own: {userns_blocker()}"
        return ViewAnswer(False, why, False, False, why)
    names = ("mnt", "pid") if root else ("user", "mnt", "pid")
    base = Path(tempfile.mkdtemp(prefix="mur-probe-view-"))
    try:
        attempts = ["ext4-loop", "tmpfs"] if root else ["tmpfs"]
        loop_why = None
        for mechanism in attempts:
            try:
                _build_and_verify(names, base, mechanism)
                return ViewAnswer(True, None, mechanism == "ext4-loop", True, loop_why)
            except _DiskRefused as exc:
                loop_why = str(exc)
                continue
            except OSError as exc:
                why = f"the tools' composed root could not be built and verified here: {exc}"
                return ViewAnswer(False, why, False, False, why)
        return ViewAnswer(False, f"no session disk could be mounted: {loop_why}", False, False, loop_why)
    finally:
        shutil.rmtree(base, ignore_errors=True)


class _DiskRefused(OSError):
    pass


def _build_and_verify(names: tuple[str, ...], base: Path, mechanism: str) -> None:
    from mur.sandbox import disk as dsk, namespaces
    from mur.sandbox.diskplan import DiskPlan, image_size, inode_limit
    from mur.sandbox.viewplan import measure_chain, plan_view

    workdir = base / "work"
    workdir.mkdir(exist_ok=True)
    (base / "beside").write_text("not granted\n")
    granted = os.path.realpath(sys.executable)
    plan = plan_view(str(workdir), [(granted, "binary python")], chains=measure_chain, tmp=True, proc=True)
    inodes = inode_limit(PROBE_LIMIT)
    disk = DiskPlan(mechanism, PROBE_LIMIT, inodes, image_size(PROBE_LIMIT, inodes))
    image_fd = None
    try:
        if mechanism == "ext4-loop":
            try:
                _path, image_fd = dsk.make_image(disk, base / f"img-{mechanism}", template=False)
            except OSError as exc:
                raise _DiskRefused(exc.errno or errno.EIO, f"ext4 image: {exc}") from None
        try:
            made = namespaces.create(names, workdir=str(workdir), view=plan, disk=disk, image_fd=image_fd)
        except namespaces.HolderFailed as exc:
            if exc.part == "disk":
                raise _DiskRefused(exc.errno or errno.EIO, str(exc)) from None
            raise
    finally:
        if image_fd is not None:
            os.close(image_fd)
    try:
        _verify(made, workdir, granted, str(base / "beside"))
    finally:
        made.close()


def _verify(made, workdir: Path, granted: str, hidden: str) -> None:
    live = made.live_root
    if live is None or made.disk_fds is None:
        raise OSError(errno.EINVAL, f"the holder reported {made.view!r}, not a composed root with a disk")
    for path in ("/etc", hidden):
        if os.path.lexists(live + path):
            raise OSError(errno.EEXIST, f"{path} is visible in the composed root")
    with open(live + granted, "rb") as fh:
        fh.read(4)
    with open(f"{live}{workdir}/written", "wb") as fh:
        fh.write(b"x")
    if os.path.exists(workdir / "written"):
        raise OSError(errno.EEXIST, "a write in the composed workdir reached the host directory")
    try:
        with open(f"{live}{workdir}/fill", "wb") as fh:
            for _ in range(PROBE_LIMIT // (1 << 20) + 2):
                fh.write(b"\0" * (1 << 20))
                fh.flush()
                os.fsync(fh.fileno())
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
    else:
        raise OSError(errno.EFBIG, "the session disk took more than its ceiling")
