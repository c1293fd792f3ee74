"""A guest-only session's disk leaves no process behind it while the session runs.

The holder that builds the composed root and mounts the session disk used to stay for the whole
session (a deployed capsule idles for days): a second process and ~6 MB of pages its Python code had
dirtied. Now it hands its fds over and exits; the runtime reaches the root through its own fd
(`/proc/<mur>/fd/<n>`), and the mount namespace lives on by its nsfs fd. What the session sees must
not change: the files of the workdir, the ceiling, everything back at the end.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mur.sandbox.probe import probe_host
from sbx_support import capabilities  # type: ignore[import-not-found]

LIMIT = 4 << 20


def children() -> set[int]:
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:  # a thread of this process (another test's, say) may end between the listing and the read
            found |= {int(c) for c in Path(f"/proc/self/task/{task}/children").read_text().split()}
        except FileNotFoundError:
            continue
    return found


def test_the_disk_holder_leaves_and_the_disk_still_serves(tmp_path):
    from mur.sandbox.guestdisk import SessionDisk

    probe = probe_host()
    if not probe.sealed:
        pytest.skip(f"no composed root on this host: {probe.sealed_reason}")
    workdir, state = tmp_path / "work", tmp_path / "session"
    workdir.mkdir()
    state.mkdir()
    (workdir / "kept.txt").write_text("from before the session\n")
    before = children()
    disk = SessionDisk(capabilities(allow=(), resources={"workdir_max_bytes": LIMIT}), workdir, probe,
                       state_dir=state, log=lambda _line: None)
    disk.open()
    try:
        assert disk.plan.mechanism in ("ext4-loop", "tmpfs"), disk.plan
        assert children() == before, "no holder (or any other process) stays for the session"
        live = Path(disk.live_workdir)
        assert str(live).startswith(f"/proc/{os.getpid()}/fd/")
        assert (live / "kept.txt").read_text() == "from before the session\n"
        (live / "new.txt").write_text("written in the session\n")
        assert not (workdir / "new.txt").exists(), "the session writes its disk, not the host directory"
        with pytest.raises(OSError) as full:
            with open(live / "big.bin", "wb") as fh:
                for _ in range(2 * LIMIT >> 16):
                    fh.write(b"x" * (1 << 16))
        assert full.value.errno in (errno.ENOSPC, errno.EDQUOT)
        (live / "big.bin").unlink()
    finally:
        disk.close()
    assert (workdir / "new.txt").read_text() == "written in the session\n"
    assert (workdir / "kept.txt").exists()
    assert list(state.iterdir()) == [], "the image is gone"
    assert children() == before
