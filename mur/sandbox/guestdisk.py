"""The disk ceiling of a session that starts no subprocess: only WASM guests and hooks write its
workdir (through preopens), and ``capabilities.resources.workdir_max_bytes`` bounds them the same
way. Where the probe built a composed root, a holder of its own mounts the session disk at the
workdir's path in a mount namespace (a user namespace too, when mur is not root) and leaves; the
runtime reaches it through its fd of that root (``live_workdir``): a guest's write past the ceiling
fails with ENOSPC. Elsewhere the watcher guards the host directory.

A mechanism the probe found but this session cannot have (a burst of sessions took every free loop
device, the image's directory is full) is decided again without it, as the shell sandbox does:
ext4 image, then tmpfs where the plan allows one, then the watcher; the session log says why.
"""

from __future__ import annotations

import errno
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from mur import fswalk
from mur.errors import MurError
from mur.fsafe import Tree
from mur.sandbox import disk as dsk, mirror, namespaces
from mur.sandbox.ceiling import COPY_SECONDS, E013_HINT
from mur.sandbox.decide import SessionFacts, guest_disk, memory_total
from mur.sandbox.diskplan import DiskPlan
from mur.sandbox.viewplan import STAGED, plan_view
from mur.sandbox.watcher import CeilingGuard, Reading, tree_reading


class SessionDisk:
    """``open()`` it after staging (the host workdir is copied in), ``close()`` at teardown (the
    tools' files are copied back); ``workdir_exceeded()`` is E-RUN-013 once the guard saw the ceiling."""

    def __init__(self, caps: Any, workdir: Path, probe: Any, *, state_dir: Path | None = None,
                 log: Callable[[str], None] = lambda _m: None) -> None:
        self.caps = caps
        self.workdir = Path(os.path.realpath(workdir))
        self.live_workdir = self.workdir
        self.log = log
        root = os.geteuid() == 0
        self._facts = SessionFacts(probe, str(self.workdir), root, memory_total=memory_total())
        self.plan: DiskPlan = guest_disk(caps, self._facts)
        self._state = state_dir
        self._holder: namespaces.SessionNamespaces | None = None
        self.disk: dsk.HeldDisk | None = None
        self._guard: CeilingGuard | None = None
        self._tree: Tree | None = None
        self._exceeded: MurError | None = None
        self._image: Path | None = None

    def open(self) -> "SessionDisk":
        try:
            self._mount_as_planned()
            self._tree = Tree(self.live_workdir)
            limit = self.plan.capacity if self.disk is not None else self.plan.limit
            self._guard = CeilingGuard(self._read, limit, self._breach, self.plan.interval, log=self.log)
            self._guard.start()
        except BaseException:
            self.close()
            raise
        return self

    def _mount_as_planned(self) -> None:
        """Mount the disk the plan names; one this session cannot have is decided again without it."""
        while self.plan.kernel:  # each failure rules a mechanism out: at most ext4, tmpfs, then the watcher
            try:
                self._mount()
                return
            except (namespaces.HolderFailed, dsk.DiskError) as exc:
                self._drop_image()  # both come before a holder or a disk exists: the image is all there is
                part = "disk-loop" if self.plan.mechanism == "ext4-loop" else "disk"
                if isinstance(exc, namespaces.HolderFailed) and exc.part != "disk":
                    part = "view"  # no mount namespace for this session: the watcher
                message = f"the session disk ({self.plan.mechanism}) could not be made: {exc}"
                self._facts = self._facts.failing(part, message)
                self.plan = guest_disk(self.caps, self._facts)
                self.log(f"{message}; deciding again without it: {self.plan.mechanism}")

    def _mount(self) -> None:
        root = os.geteuid() == 0
        image_fd = None
        if self.plan.mechanism == "ext4-loop":
            image_fd = self._make_image()
        staged = os.path.isdir(self.workdir / STAGED) and not os.path.islink(self.workdir / STAGED)
        view = plan_view(str(self.workdir), [], chains=lambda _p: None, tmp=False, proc=False, devices=False,
                         staged=staged)
        try:
            self._holder = namespaces.create(("mnt",) if root else ("user", "mnt"), workdir=str(self.workdir),
                                             view=view, disk=self.plan, image_fd=image_fd)
        finally:
            if image_fd is not None:
                os.close(image_fd)
        fds = self._holder.take_disk()
        if fds is None or self._holder.live_root is None:
            raise MurError("E-IO-003", "the session disk could not be mounted (the holder sent none)")
        self.disk = dsk.HeldDisk(self.plan, fds[0], fds[1], image=self._image)
        try:
            self.disk.copy_in(self.workdir, None, deadline=time.monotonic() + COPY_SECONDS)
        except mirror.DiskFull as exc:
            raise MurError("E-RUN-013", f"the workdir {self.workdir} already holds more than "
                           f"capabilities.resources.workdir_max_bytes ({self.plan.limit}) can take: "
                           f"{exc.filename} did not fit", E013_HINT) from exc
        self.live_workdir = Path(self._holder.live_root + str(self.workdir))

    def _make_image(self) -> int:
        """The session's image (``self._image``) and an fd of it; DiskError when it cannot be made."""
        state = self._state or Path(tempfile.mkdtemp(prefix="mur-disk-"))
        try:
            self._image, fd = dsk.make_image(self.plan, state)
        except OSError as exc:
            if self._state is None:
                try:
                    os.rmdir(state)  # ours and empty: make_image removes its file when it fails
                except OSError:
                    pass
            raise dsk.DiskError(exc.errno or errno.EIO, f"its image: {exc}") from exc
        return fd

    def _read(self) -> Reading:
        if self.disk is not None:
            u = self.disk.usage()
            return Reading(u.used, u.inodes, u.full, f"{u.used} bytes in {u.inodes} inodes on the session disk")
        assert self._tree is not None
        got = tree_reading([self._tree.fd], limit=self.plan.limit, inode_limit=self.plan.inodes)
        return Reading(got.used, got.inodes, got.full, "counted by mur's watcher (st_blocks)")

    def _breach(self, reading: Reading) -> None:
        self._exceeded = MurError(
            "E-RUN-013", f"the session workdir reached capabilities.resources.workdir_max_bytes ({self.plan.limit}): "
            f"{reading.detail}", E013_HINT)
        self.log(self._exceeded.message)

    def workdir_exceeded(self) -> MurError | None:
        if self._exceeded is None and self._guard is not None and self.disk is not None:
            self._guard.check()
        return self._exceeded

    def close(self) -> None:
        """Stop the guard, bring the files back, release the disk; never raises."""
        if self._guard is not None:
            self._guard.stop()
            self._guard = None
        if self._tree is not None:
            self._tree.close()
            self._tree = None
        holder, self._holder = self._holder, None
        if holder is not None:
            holder.release()  # our fds of its namespace and root (the holder itself left after the mount)
        if self.disk is not None:
            keep = False
            try:
                report = self.disk.copy_out(self.workdir, None, deadline=time.monotonic() + COPY_SECONDS)
                if report.skipped_count:
                    self.log(f"session disk: {report.skipped_count} entries not brought back: "
                             + "; ".join(report.skipped))
            except BaseException as exc:
                keep = self._image is not None
                self.log(f"session disk: bringing the workdir back failed: {exc!r}")
            self.disk.close(keep_image=keep)
            self.disk = None
        self.live_workdir = self.workdir
        if holder is not None:
            holder.reap()
        if self._state is None:
            self._drop_image()

    def _drop_image(self) -> None:
        """Remove the image, or the temporary directory made for it when the session gave none."""
        image, self._image = self._image, None
        if image is None:
            return
        try:
            if self._state is not None:
                image.unlink()
                return
            with Tree(image.parent.parent) as parent:
                parent.remove_tree(image.parent.name, deadline=time.monotonic() + 60)
        except (OSError, fswalk.WalkTimeout):
            pass
