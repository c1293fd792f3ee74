"""Smaller sandbox modules: ACL grants, the workdir-size guard, the probe's JSON, BPF compilation."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time

import pytest

from mur.sandbox import access, acl, landlock, seccomp, watcher
from mur.sandbox.policy import seccomp_table, socket_grant
from mur.sandbox.probe import HostProbe, probe_host

# --- ACLs ---


def test_acl_entries_roundtrip_and_mask():
    base = acl.from_mode(0o750)
    granted = acl.with_user(base, 65534, 6)
    assert (acl.USER, 6, 65534) in granted and (acl.MASK, 6 | 5, acl.UNDEFINED_ID) in granted
    assert acl.decode(acl.encode(granted)) == sorted(granted, key=lambda e: (e[0], e[2]))
    assert acl.without_user(granted, 65534) is None  # back to a plain mode
    other = acl.with_user(granted, 1000, 4)
    kept = acl.without_user(other, 65534)
    assert (acl.USER, 4, 1000) in kept and (acl.MASK, 5, acl.UNDEFINED_ID) in kept


def _acl_supported(path) -> bool:
    try:
        os.setxattr(path, acl.ACCESS, acl.encode(acl.from_mode(0o700)))
        return True
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
            return False
        raise


def test_grant_and_revoke_restore_the_tree(tmp_path):
    work = tmp_path / "a" / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "f.txt").write_text("x")
    os.chmod(work / "sub" / "f.txt", 0o640)
    os.chmod(tmp_path / "a", 0o700)
    if not _acl_supported(str(tmp_path / "a")):
        pytest.skip("filesystem without POSIX ACLs")
    os.removexattr(tmp_path / "a", acl.ACCESS)
    before = {p: os.stat(p).st_mode for p in (tmp_path / "a", work, work / "sub" / "f.txt")}
    grant = access.WorkdirAccess(str(work), 65534, 65534, state_dir=str(tmp_path / "state"))
    grant.grant()
    assert grant.mode == "acl"
    assert (acl.USER, 6, 65534) in acl.decode(os.getxattr(work / "sub" / "f.txt", acl.ACCESS))
    assert (acl.USER, 7, 65534) in acl.decode(os.getxattr(work / "sub", acl.DEFAULT))
    anc = acl.decode(os.getxattr(tmp_path / "a", acl.ACCESS))
    assert (acl.USER, 1, 65534) in anc  # search only on the 0700 ancestor
    (work / "later.txt").write_text("created during the session")  # inherits the default entry
    assert (acl.USER, 7, 65534) in acl.decode(os.getxattr(work / "later.txt", acl.ACCESS))
    grant.revoke()
    after = {p: os.stat(p).st_mode for p in before}
    assert after == before
    for p in (tmp_path / "a", work, work / "sub", work / "sub" / "f.txt", work / "later.txt"):
        assert acl.ACCESS not in os.listxattr(p) and acl.DEFAULT not in os.listxattr(p)


def test_concurrent_sessions_share_an_ancestor_and_never_strip_each_others_entry(tmp_path):
    """Two sessions (two uids) under one 0700 ancestor: the first to end removes only its own
    search entry; the last restores the ancestor exactly. A session that died is pruned."""
    from mur.sandbox.ancestors import Ancestors

    top = tmp_path / "top"
    (top / "a").mkdir(parents=True)
    os.chmod(top, 0o700)
    if not _acl_supported(str(top)):
        pytest.skip("filesystem without POSIX ACLs")
    os.removexattr(top, acl.ACCESS)
    before = os.stat(top).st_mode
    state = str(tmp_path / "state")
    live = {65534, 65533}
    first, second = (Ancestors(uid, state_dir=state, alive=lambda u: u in live) for uid in (65534, 65533))
    notes: list[str] = []
    first.grant([str(top)], notes)
    second.grant([str(top)], notes)
    entries = acl.decode(os.getxattr(top, acl.ACCESS))
    assert {(acl.USER, 1, 65534), (acl.USER, 1, 65533)} <= set(entries) and notes == []
    first.revoke()
    entries = acl.decode(os.getxattr(top, acl.ACCESS))
    assert (acl.USER, 1, 65533) in entries and not any(e[2] == 65534 for e in entries if e[0] == acl.USER)
    assert next(p for t, p, _ in entries if t == acl.MASK) & 1  # the survivor can still search it
    second.revoke()
    assert acl.ACCESS not in os.listxattr(top) and os.stat(top).st_mode == before
    # a session killed without revoking: the next one to touch the ancestor prunes its entry
    dead = Ancestors(65532, state_dir=state, alive=lambda u: u in live)
    dead.grant([str(top)], notes)
    live.discard(65532)
    survivor = Ancestors(65534, state_dir=state, alive=lambda u: u in live)
    survivor.grant([str(top)], notes)
    assert not any(e[0] == acl.USER and e[2] == 65532 for e in acl.decode(os.getxattr(top, acl.ACCESS)))
    survivor.revoke()
    assert acl.ACCESS not in os.listxattr(top) and os.stat(top).st_mode == before


# --- the workdir ceiling's guard (watcher.py) ---


def _reading(root, limit: int, **kw) -> watcher.Reading:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return watcher.tree_reading([fd], limit=limit, inode_limit=kw.pop("inode_limit", 1000), **kw)
    finally:
        os.close(fd)


def test_the_watcher_counts_blocks_each_inode_once_and_not_symlink_targets(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"x" * 10000)
    os.link(tmp_path / "d" / "a", tmp_path / "b")
    os.symlink("/usr", tmp_path / "link")
    with open(tmp_path / "sparse", "wb") as fh:
        fh.truncate(1 << 30)  # st_size 1 GiB, no blocks: what it takes on disk is what counts
    fd = os.open(tmp_path / "keep", os.O_WRONLY | os.O_CREAT)
    os.posix_fallocate(fd, 0, 1 << 20)  # blocks without size (fallocate's KEEP_SIZE is the same to st_blocks)
    os.close(fd)
    got = _reading(tmp_path, 1 << 40)
    assert (1 << 20) + 10000 <= got.used < (1 << 20) + 10000 + 64 * 1024
    assert got.inodes == 6


def test_the_watcher_counts_files_open_with_no_name(tmp_path):
    """O_TMPFILE and unlinked-while-open files hold blocks no walk sees: found through /proc/<pid>/fd."""
    fd = os.open(tmp_path, os.O_TMPFILE | os.O_WRONLY, 0o600)
    try:
        os.write(fd, b"x" * (512 << 10))
        os.fsync(fd)
        hidden = _reading(tmp_path, 1 << 40, pids=lambda: [os.getpid()])
        assert hidden.used >= 512 << 10 and "open file(s) with no name" in hidden.detail
        assert _reading(tmp_path, 1 << 40).used < 512 << 10  # without the tools' pids: not seen
    finally:
        os.close(fd)


def test_the_guard_fires_once_within_a_fixed_interval(tmp_path):
    fired = []
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    read = lambda: watcher.tree_reading([fd], limit=1 << 20, inode_limit=1000)  # noqa: E731
    guard = watcher.CeilingGuard(read, 200 << 10, fired.append, interval=0.05)
    guard.start()
    try:
        (tmp_path / "ok").write_bytes(b"x" * (100 << 10))
        time.sleep(0.2)
        assert fired == []
        (tmp_path / "over").write_bytes(b"x" * (200 << 10))
        deadline = time.monotonic() + 5
        while not fired and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(fired) == 1 and fired[0].used > 200 << 10
        (tmp_path / "more").write_bytes(b"x")
        time.sleep(0.2)
        assert len(fired) == 1
    finally:
        guard.stop()
        os.close(fd)


def test_the_guard_survives_a_reading_that_fails(tmp_path):
    """What it walks cannot kill it: an exception costs one reading, the next comes on time."""
    calls = []

    def read():
        calls.append(1)
        if len(calls) < 3:
            raise RecursionError("a tool-made tree")
        return watcher.Reading(10, 1)

    notes: list[str] = []
    guard = watcher.CeilingGuard(read, 5, lambda r: notes.append("fired"), interval=0.02, log=notes.append)
    guard.start()
    deadline = time.monotonic() + 5
    while "fired" not in notes and time.monotonic() < deadline:
        time.sleep(0.02)
    guard.stop()
    assert "fired" in notes and len(calls) >= 3 and any("a reading failed" in n for n in notes)


def test_too_many_inodes_is_a_breach(tmp_path):
    for i in range(20):
        (tmp_path / f"e{i}").touch()
    assert _reading(tmp_path, 1 << 40, inode_limit=10).full
    assert not _reading(tmp_path, 1 << 40, inode_limit=100).full


def test_bytes_the_runtime_holds_for_a_running_call_count_toward_the_limit(tmp_path):
    """A tool printing without end fills an unnamed spool, in no tree the walk sees: it is counted."""
    (tmp_path / "f").write_bytes(b"x" * 1000)
    assert _reading(tmp_path, 1 << 40, extra=lambda: 4500).used >= 5500


# --- probe, landlock constants, seccomp compilation ---


def test_probe_is_cached_and_consistent():
    first = probe_host()
    assert probe_host() is first
    assert isinstance(first, HostProbe)
    assert first.achieved in ("sealed", "scoped", "advisory")
    assert (first.tier == "full") == (first.achieved in ("sealed", "scoped")) == (first.reason is None)
    assert (first.achieved == "sealed") == first.sealed


def test_probe_module_prints_one_json_line():
    out = subprocess.run([sys.executable, "-m", "mur.sandbox.probe"], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and out.stderr == ""
    data = json.loads(lines[0])
    assert set(data) == set(HostProbe.__dataclass_fields__)


def test_landlock_rights_per_abi():
    assert landlock.fs_rights_for_abi(0) == 0
    assert landlock.fs_rights_for_abi(1) == (1 << 13) - 1
    assert landlock.fs_rights_for_abi(3) & landlock.TRUNCATE and not landlock.fs_rights_for_abi(2) & landlock.TRUNCATE
    assert landlock.fs_rights_for_abi(5) & landlock.IOCTL_DEV and not landlock.fs_rights_for_abi(4) & landlock.IOCTL_DEV
    assert landlock.fs_rights_for_abi(7) == landlock.fs_rights_for_abi(6)
    assert landlock.rights_names(landlock.READ_FILE | landlock.EXECUTE) == ["execute", "read_file"]


@pytest.mark.skipif(seccomp.load_module() is None, reason="libseccomp not installed")
def test_seccomp_table_compiles_to_two_programs_within_the_kernel_limit():
    with_unix = seccomp.compile_filter(seccomp_table(socket_grant(unix=True, inet=True, private_net=True)))
    without_unix = seccomp.compile_filter(seccomp_table(socket_grant(unix=False, inet=True, private_net=True)))
    for program in (with_unix, without_unix):
        assert len(program.bpf) == 2 and all(len(b) % 8 == 0 for b in program.bpf)
        assert all(40 < n < 4096 for n in program.instructions)  # BPF_MAXINSNS
    assert with_unix.instructions[0] == without_unix.instructions[0]  # the allowlist does not depend on sockets
    assert with_unix.instructions[1] != without_unix.instructions[1]
