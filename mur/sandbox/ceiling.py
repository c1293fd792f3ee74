"""A ShellSandbox's storage and its ceiling: the runtime's own directory for the session (the disk
image, a private /tmp where there is no disk), the session disk (made with the namespace holder,
filled from the host workdir before any tool runs, brought back at the end), and the guard that
reports E-RUN-013 (watcher.py).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from mur import fswalk
from mur.errors import MurError
from mur.fsafe import Tree
from mur.sandbox import isolation, mirror, namespaces, policy as pol
from mur.sandbox.disk import HeldDisk
from mur.sandbox.watcher import CeilingGuard, Reading, tree_reading

COPY_SECONDS = 600.0  # copy-in and copy-out are bounded by the ceiling; this bounds them in time too
E013_HINT = "raise capabilities.resources.workdir_max_bytes, or have the capsule clean up after itself"


class Ceiling:
    """See the module docstring; ``box`` is the ShellSandbox."""

    def __init__(self, box: Any) -> None:
        self.box = box
        self.state: Path | None = None
        self._made_state = False
        self.image: Path | None = None
        self.host_tmp: Path | None = None
        self._tmp_tree: Tree | None = None
        self._guard: CeilingGuard | None = None

    # --- the runtime's own directory -----------------------------------------------------------

    def state_dir(self, given: Path | None) -> Path:
        """The session directory (mur run), else the logs' parent outside the workdir, else a fresh
        0700 temporary directory removed at close."""
        box = self.box
        if given is None and box.logs_dir is not None and not _inside(box.logs_dir, box.workdir):
            given = box.logs_dir.parent
        if given is None:
            given = Path(tempfile.mkdtemp(prefix=f"mur-{box.session_id[-12:]}-"))
            self._made_state = True
        self.state = Path(given)
        return self.state

    # --- making it -----------------------------------------------------------------------------

    def make(self, policy: pol.ShellPolicy) -> tuple[namespaces.SessionNamespaces | None, HeldDisk | None]:
        """The namespace holder with the composed root and the session disk (filled from the host
        workdir); isolation.Replan when a part cannot be made."""
        box = self.box
        assert self.state is not None
        made_image = isolation.disk_image(policy, self.state)
        image_fd = None
        if made_image is not None:
            self.image, image_fd = made_image
        kernel = policy.view is not None and policy.disk is not None and policy.disk.kernel
        host_tmp = None
        if policy.view is not None and policy.view.tmp is not None and not kernel:
            host_tmp = self._make_host_tmp(policy)
        try:
            held = isolation.holder(policy, str(box.workdir), image_fd=image_fd,
                                    host_tmp=str(host_tmp) if host_tmp else None, log=box.log)
        finally:
            if image_fd is not None:
                os.close(image_fd)  # the loop device holds the image now
        if not kernel or held is None:
            return held, None
        fds = held.take_disk()
        if fds is None:
            held.close()
            message = "the holder sent no session disk"
            raise isolation.Replan(message, lambda facts: facts.failing("disk", message))
        disk = HeldDisk(policy.disk, fds[0], fds[1], image=self.image)  # type: ignore[arg-type]
        try:
            disk.copy_in(box.workdir, policy.run_as, deadline=time.monotonic() + COPY_SECONDS)
        except mirror.DiskFull as exc:
            disk.close()
            held.close()
            with Tree(box.workdir) as host:
                used = fswalk.usage(host.fd, deadline=time.monotonic() + 30)
            raise MurError("E-RUN-013", f"the workdir {box.workdir} already holds more than "
                           f"capabilities.resources.workdir_max_bytes ({policy.disk.limit}) can take "  # type: ignore[union-attr]
                           f"(about {used.bytes} bytes in {used.inodes} inodes): {exc.filename} did not fit",
                           E013_HINT) from exc
        except (OSError, fswalk.WalkTimeout) as exc:
            disk.close()
            held.close()
            raise MurError("E-IO-003", f"cannot copy the workdir {box.workdir} onto the session disk: {exc}") from exc
        for note in disk.notes[:20]:
            box.log(f"session disk: {note}")
        return held, disk

    def _make_host_tmp(self, policy: pol.ShellPolicy) -> Path:
        """A private /tmp on the host, in the runtime's own directory (counted by the watcher)."""
        assert self.state is not None
        path = self.state / "tmp"
        path.mkdir(mode=0o700, exist_ok=True)
        if policy.run_as is not None:
            os.chown(path, *policy.run_as)
        self.host_tmp = path
        return path

    # --- the guard -----------------------------------------------------------------------------

    def guard(self, policy: pol.ShellPolicy) -> None:
        plan = policy.disk
        if plan is None:
            return
        # a session disk can hold no more than its capacity: "full" is the breach there (disk.Usage)
        limit = plan.capacity if plan.kernel and policy.view is not None else plan.limit
        self._guard = CeilingGuard(self.read, limit, self._breach, plan.interval, log=self.box.log)
        self._guard.start()

    def read(self) -> Reading:
        """What counts toward the ceiling now (watcher.py)."""
        box = self.box
        plan = box.policy.disk
        spools = sum(c.spooled for c in box._captures)
        logs = box._logs
        logs_outside = logs is not None and not _inside(box.logs_dir, box.live_workdir)
        log_bytes = fswalk.usage(logs.fd).bytes if logs_outside and logs is not None else 0
        if box.disk is not None:
            u = box.disk.usage()
            return Reading(u.used + log_bytes + spools, u.inodes, u.full,
                           f"{u.used} bytes in {u.inodes} inodes on the session disk ({plan.mechanism}), "
                           f"{log_bytes} in the shell logs, {spools} in output spools")
        trees = [box._work.fd] if box._work is not None else []
        if self.host_tmp is not None:
            if self._tmp_tree is None:
                self._tmp_tree = Tree(self.host_tmp)
            trees.append(self._tmp_tree.fd)
        reading = tree_reading(trees, limit=plan.limit, inode_limit=plan.inodes, pids=box.tool_pids,
                               extra=lambda: log_bytes + spools)
        detail = f"{reading.used} bytes in {reading.inodes} inodes (st_blocks, counted by mur's watcher)"
        return Reading(reading.used, reading.inodes, reading.full, "; ".join(p for p in (detail, reading.detail) if p))

    def after_call(self) -> None:
        """A call just ended: with a session disk a reading costs one fstatvfs, so take it now."""
        if self._guard is not None and self.box.disk is not None:
            try:
                self._guard.check()
            except OSError:
                pass

    def _breach(self, reading: Reading) -> None:
        limit = self.box.caps.resources.workdir_max_bytes
        plan = self.box.policy.disk
        if plan is not None and plan.kernel:
            what = "no inode left" if reading.full and reading.inodes >= plan.inodes else "no block left"
            message = (f"the session workdir reached capabilities.resources.workdir_max_bytes ({limit}): "
                       f"{reading.used} bytes in use, {what} (the kernel refused the tools' next write); "
                       f"{reading.detail}")
        else:
            message = (f"the session workdir grew to {reading.used} bytes, past "
                       f"capabilities.resources.workdir_max_bytes ({limit}): {reading.detail}")
            if reading.full:
                message = (f"the session workdir holds {reading.inodes} inodes, past the inode limit of a "
                           f"{limit}-byte workdir ({plan.inodes if plan else '?'}): {reading.detail}")
        self.box.workdir_breach(MurError("E-RUN-013", message, E013_HINT))

    def stop(self) -> None:
        if self._guard is not None:
            self._guard.stop()
            self._guard = None

    # --- the end -------------------------------------------------------------------------------

    def bring_back(self) -> None:
        """Copy what the tools left on the session disk into the host workdir (never raises)."""
        box = self.box
        disk = box.disk
        if disk is None:
            return
        keep = False
        try:
            owner = None
            if box.policy is not None and box.policy.run_as is not None:
                st = os.stat(box.workdir)
                owner = (st.st_uid, st.st_gid)
            report = disk.copy_out(box.workdir, owner, deadline=time.monotonic() + COPY_SECONDS)
            if report.skipped_count:
                box.log(f"session disk: {report.skipped_count} entries not brought back to {box.workdir}: "
                        + "; ".join(report.skipped))
        except BaseException as exc:  # the trace and the next run must not depend on this
            keep = disk.image is not None
            where = f" (the disk image is kept at {disk.image})" if keep else ""
            box.log(f"session disk: bringing the workdir back to {box.workdir} failed: {exc!r}{where}")
        finally:
            disk.close(keep_image=keep)
            box.disk = None
            if not keep:
                self.image = None

    def discard(self, final: bool = True) -> None:
        """Remove what the runtime made for the session's storage (the image, the host /tmp, and when
        ``final`` a temporary state directory); iterative, never following a link the tools left."""
        if self._tmp_tree is not None:
            self._tmp_tree.close()
            self._tmp_tree = None
        if self.image is not None:
            try:
                self.image.unlink()
            except OSError:
                pass
            self.image = None
        if self.host_tmp is not None and self.state is not None:
            _remove(self.state, self.host_tmp.name, self.box.log)
            self.host_tmp = None
        if final and self._made_state and self.state is not None:
            _remove(self.state.parent, self.state.name, self.box.log)
            self.state, self._made_state = None, False


def _inside(path: Path | None, root: Path) -> bool:
    if path is None:
        return True
    p, r = str(path), str(root).rstrip("/")
    return p == r or p.startswith(r + "/")


def _remove(parent: Path, name: str, log: Any) -> None:
    try:
        with Tree(parent) as tree:
            tree.remove_tree(name, deadline=time.monotonic() + COPY_SECONDS)
    except (OSError, fswalk.WalkTimeout) as exc:
        log(f"could not remove {parent / name}: {exc}")

