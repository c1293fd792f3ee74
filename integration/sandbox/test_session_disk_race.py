"""Sessions started at once race for loop devices: each asks /dev/loop-control for the free number
and all get the same one, so all but one find it taken when they bind their image (EBUSY). Forced
here by answering GET_FREE with a device this test holds, on the real loop driver:

* the session asks again and binds another device; the one it was told about stays the test's;
* when every answer is taken, "no free loop device" (EBUSY), never a device shared with another;
* a session of guests only (mur.sandbox.guestdisk) that gets no loop device decides again without
  the ext4 image (tmpfs, else the watcher), says why in its log, keeps its ceiling and leaves no
  image behind: before, the holder's failure ended the run as E-INTERNAL.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from mur.sandbox import disk as dsk
from mur.sandbox.probe import probe_host
from sbx_support import capabilities  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_root]

LIMIT = 4 << 20


@pytest.fixture(scope="module")
def loop_probe():
    probe = probe_host()
    if not (probe.sealed and probe.disk_loop):
        pytest.skip(f"no loop-mounted session disk on this host: {probe.disk_reason or probe.sealed_reason}")
    return probe


def backing(device: str) -> str:
    return Path(f"/sys/block/{os.path.basename(device)}/loop/backing_file").read_text().strip()


@pytest.fixture
def held(tmp_path):
    """A loop device this test holds (bound to its own image, detached when the fd closes)."""
    image = tmp_path / "held.img"
    with open(image, "wb") as fh:
        fh.truncate(1 << 20)
    fd = os.open(image, os.O_RDWR)
    device, loop = dsk._loop_attach(fd)
    os.close(fd)
    yield device, str(image)
    os.close(loop)


class TakenAnswers:
    """fcntl for mur.sandbox.disk whose LOOP_CTL_GET_FREE answers ``number`` the first ``times``
    times (a device another session bound meanwhile), then the kernel's own answer."""

    def __init__(self, number: int, times: int) -> None:
        self.number, self.times, self.asked = number, times, 0

    def ioctl(self, fd, request, *args):
        if request == dsk.LOOP_CTL_GET_FREE:
            self.asked += 1
            if self.asked <= self.times:
                return self.number
        return fcntl.ioctl(fd, request, *args)


def number(device: str) -> int:
    return int(device.removeprefix("/dev/loop"))


def test_a_device_taken_after_get_free_is_asked_for_again(loop_probe, held, tmp_path, monkeypatch):
    device, image = held
    answers = TakenAnswers(number(device), times=3)
    monkeypatch.setattr(dsk, "fcntl", answers)
    mine = tmp_path / "mine.img"
    with open(mine, "wb") as fh:
        fh.truncate(1 << 20)
    fd = os.open(mine, os.O_RDWR)
    try:
        got, loop = dsk._loop_attach(fd)
    finally:
        os.close(fd)
    try:
        assert answers.asked == 4, "asked once per taken answer, then once more"
        assert got != device
        assert backing(got) == str(mine)
        assert backing(device) == image, "the device another session held is untouched"
    finally:
        os.close(loop)


def test_when_every_answer_is_taken_the_attach_fails_cleanly(loop_probe, held, tmp_path, monkeypatch):
    device, image = held
    monkeypatch.setattr(dsk, "fcntl", TakenAnswers(number(device), times=10**6))
    monkeypatch.setattr(dsk, "LOOP_TRIES", 5)
    mine = tmp_path / "mine.img"
    with open(mine, "wb") as fh:
        fh.truncate(1 << 20)
    fd = os.open(mine, os.O_RDWR)
    try:
        with pytest.raises(OSError) as err:
            dsk._loop_attach(fd)
    finally:
        os.close(fd)
    assert err.value.errno == errno.EBUSY and "no free loop device" in str(err.value)
    assert backing(device) == image


def test_a_guest_session_without_a_free_loop_device_decides_again(loop_probe, held, tmp_path, monkeypatch):
    """The holder is a fork of this process, so it inherits the taken answers."""
    from mur.sandbox.guestdisk import SessionDisk

    device, _image = held
    monkeypatch.setattr(dsk, "fcntl", TakenAnswers(number(device), times=10**6))
    monkeypatch.setattr(dsk, "LOOP_TRIES", 3)
    workdir, state = tmp_path / "work", tmp_path / "session"
    workdir.mkdir()
    state.mkdir()
    (workdir / "kept.txt").write_text("from before the session\n")
    logged: list[str] = []
    caps = capabilities(allow=(), resources={"workdir_max_bytes": LIMIT})
    disk = SessionDisk(caps, workdir, loop_probe, state_dir=state, log=logged.append)
    assert disk.plan.mechanism == "ext4-loop", "the probe found loop devices: the plan starts there"
    disk.open()
    try:
        assert disk.plan.mechanism in ("tmpfs", "watcher"), disk.plan
        assert any("no free loop device" in line and "deciding again" in line for line in logged), logged
        assert list(state.iterdir()) == [], "the image that found no device is gone"
        live = Path(disk.live_workdir)
        assert (live / "kept.txt").read_text() == "from before the session\n"
        try:
            with open(live / "big.bin", "wb") as fh:
                for _ in range(2 * LIMIT >> 16):
                    fh.write(b"x" * (1 << 16))
        except OSError as exc:
            assert exc.errno in (errno.ENOSPC, errno.EDQUOT) and disk.plan.mechanism == "tmpfs"
        else:
            assert disk.plan.mechanism == "watcher"
        exceeded = disk.workdir_exceeded()
        if disk.plan.mechanism == "watcher":
            assert exceeded is not None and exceeded.code == "E-RUN-013"
    finally:
        disk.close()
    assert (workdir / "kept.txt").exists()
    assert list(state.iterdir()) == []
