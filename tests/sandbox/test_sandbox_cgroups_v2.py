"""The cgroup v2 path against a fake cgroupfs (a tmp dir that enforces cgroupfs' rules).

Pure v2 cannot be exercised on the hybrid CI hosts; the qemu VM integration tests run the real
thing. The fake enforces what matters for correctness: controllers must be available in the parent
before they can be enabled, "no internal processes" (a non-root cgroup with tasks cannot enable
subtree controllers), control files exist only for enabled controllers, rmdir needs an empty
cgroup, cgroup.kill empties the subtree.
"""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from mur.sandbox import cgroups as cg

LIMITS = cg.CgroupLimits(memory_bytes=64 << 20, pids_max=32, cpu_percent=150, io_bytes_per_sec=10 << 20)
MY_PID = os.getpid()
FAKE_PIDS = (999_999_001, 999_999_002)  # above pid_max: os.kill can never hit a real process


class FakeCgroupFS(cg.CgroupFS):
    CONTROL_FILES = {
        "memory": ("memory.max", "memory.swap.max", "memory.events"),
        "pids": ("pids.max", "pids.events"),
        "cpu": ("cpu.max",),
        "io": ("io.max",),
    }

    def __init__(self, root: str, controllers: str = "cpu io memory pids", root_enabled: str = "") -> None:
        self.root = root
        self.writes: list[tuple[str, str]] = []
        os.makedirs(root, exist_ok=True)
        for name, text in (("cgroup.controllers", controllers), ("cgroup.subtree_control", root_enabled),
                           ("cgroup.procs", "")):
            with open(os.path.join(root, name), "w") as fh:
                fh.write(text)

    # helpers for the tests
    def procs(self, path: str) -> list[int]:
        with open(os.path.join(path, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]

    def add_proc(self, path: str, pid: int) -> None:
        with open(os.path.join(path, "cgroup.procs"), "a") as fh:
            fh.write(f"{pid}\n")

    def content(self, path: str) -> str:
        with open(path) as fh:
            return fh.read()

    # cgroupfs semantics
    def mkdir(self, path: str) -> None:
        if os.path.isdir(path):
            return
        os.mkdir(path)
        enabled = self.content(os.path.join(os.path.dirname(path), "cgroup.subtree_control")).split()
        files = {"cgroup.controllers": " ".join(enabled), "cgroup.subtree_control": "", "cgroup.procs": "",
                 "cgroup.kill": "", "cgroup.events": "populated 0\n"}
        for ctrl in enabled:
            for f in self.CONTROL_FILES.get(ctrl, ()):
                files[f] = "oom_kill 0\n" if f == "memory.events" else "max 0\n" if f == "pids.events" else "max"
        for name, text in files.items():
            with open(os.path.join(path, name), "w") as fh:
                fh.write(text)

    def rmdir(self, path: str) -> None:
        if not os.path.isdir(path):
            raise FileNotFoundError(errno.ENOENT, "no such cgroup", path)
        if self.procs(path) or any(os.path.isdir(os.path.join(path, e)) for e in os.listdir(path)):
            raise OSError(errno.EBUSY, "cgroup busy", path)
        shutil.rmtree(path)

    def write(self, path: str, text: str) -> None:
        self.writes.append((os.path.relpath(path, self.root), text))
        directory, name = os.path.split(path)
        if not os.path.exists(path):
            raise PermissionError(errno.EACCES, "no such control file", path)
        if name == "cgroup.subtree_control":
            available = self.content(os.path.join(directory, "cgroup.controllers")).split()
            current = set(self.content(path).split())
            if directory != self.root and self.procs(directory):
                raise OSError(errno.EBUSY, "no internal processes", path)
            for token in text.split():
                if token[1:] not in available:
                    raise OSError(errno.ENOENT, f"controller {token[1:]} not available", path)
                current.add(token[1:])
            with open(path, "w") as fh:
                fh.write(" ".join(sorted(current)))
            return
        if name == "cgroup.procs":
            pid = int(text)
            for d, _dirs, _files in os.walk(self.root):
                if pid in self.procs(d):
                    with open(os.path.join(d, "cgroup.procs"), "w") as fh:
                        fh.write("".join(f"{p}\n" for p in self.procs(d) if p != pid))
            self.add_proc(directory, pid)
            return
        if name == "cgroup.kill":
            for d, _dirs, _files in os.walk(directory):
                with open(os.path.join(d, "cgroup.procs"), "w") as fh:
                    fh.write("")
            return
        with open(path, "w") as fh:
            fh.write(text)


def mounts(root: str) -> str:
    return f"cgroup2 {root} cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"


def test_root_creates_top_level_mur_subtree_with_every_limit(tmp_path):
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root)
    fs.add_proc(root, MY_PID)  # the root cgroup may hold tasks and still enable controllers
    group = cg.create_v2("ses_1", LIMITS, mounts_text=mounts(root), self_cgroup_text=lambda: "0::/\n",
                         is_root=True, systemd=True, workdir_dev="254:0", fs=fs,
                         scope_request=lambda user: pytest.fail("root path must not ask systemd"))
    path = os.path.join(root, "mur", "ses_1")
    assert group.dirs == {"unified": path}
    assert group.procs_files == [os.path.join(path, "cgroup.procs")]
    assert fs.content(os.path.join(path, "memory.max")) == str(64 << 20)
    assert fs.content(os.path.join(path, "memory.swap.max")) == "0"
    assert fs.content(os.path.join(path, "pids.max")) == "32"
    assert fs.content(os.path.join(path, "cpu.max")) == "150000 100000"
    assert fs.content(os.path.join(path, "io.max")) == f"254:0 rbps={10 << 20} wbps={10 << 20}"
    # controllers were enabled top-down before the child's files were written
    order = [w for w, _ in fs.writes]
    assert order.index("cgroup.subtree_control") < order.index("mur/cgroup.subtree_control")
    assert order.index("mur/cgroup.subtree_control") < order.index("mur/ses_1/memory.max")
    assert group.notes == []


def test_children_join_and_cleanup_kills_and_removes_everything(tmp_path):
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root, root_enabled="cpu io memory pids")
    group = cg.create_v2("ses_2", LIMITS, mounts_text=mounts(root), self_cgroup_text=lambda: "0::/\n",
                         is_root=True, systemd=False, workdir_dev=None, fs=fs)
    path = group.dirs["unified"]
    for pid in FAKE_PIDS:
        fs.write(group.procs_files[0], str(pid))
    assert group.pids() == set(FAKE_PIDS)
    group.remove()
    assert ("mur/ses_2/cgroup.kill", "1") in fs.writes
    assert not os.path.exists(path)
    assert not os.path.exists(os.path.join(root, "mur"))  # the shared parent goes once empty
    group.remove()  # idempotent


def test_io_max_is_best_effort(tmp_path):
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root, controllers="cpu memory pids")
    group = cg.create_v2("ses_3", LIMITS, mounts_text=mounts(root), self_cgroup_text=lambda: "0::/\n",
                         is_root=True, systemd=False, workdir_dev="8:0", fs=fs)
    assert any("io" in note for note in group.notes)
    assert not os.path.exists(os.path.join(group.dirs["unified"], "io.max"))
    group.remove()


def test_parent_shared_with_a_live_session_is_kept(tmp_path):
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root)
    kwargs = dict(mounts_text=mounts(root), self_cgroup_text=lambda: "0::/\n", is_root=True, systemd=False,
                  workdir_dev=None, fs=fs)
    a = cg.create_v2("ses_a", LIMITS, **kwargs)
    b = cg.create_v2("ses_b", LIMITS, **kwargs)
    a.remove()
    assert os.path.isdir(os.path.join(root, "mur", "ses_b"))
    b.remove()
    assert not os.path.exists(os.path.join(root, "mur"))


def test_unprivileged_uses_delegated_scope_and_moves_itself_to_a_supervisor(tmp_path):
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root, root_enabled="cpu io memory pids")
    scope = os.path.join(root, "user.slice", "mur-1.scope")
    fs.mkdir(os.path.join(root, "user.slice"))
    fs.write(os.path.join(root, "user.slice", "cgroup.subtree_control"), "+cpu +io +memory +pids")
    fs.mkdir(scope)
    fs.add_proc(scope, MY_PID)
    asked: list[bool] = []
    where = {"path": "/user.slice/mur-1.scope"}

    def self_cgroup() -> str:
        return f"0::{where['path']}\n"

    group = cg.create_v2("ses_4", LIMITS, mounts_text=mounts(root), self_cgroup_text=self_cgroup,
                         is_root=False, systemd=True, workdir_dev=None, fs=fs,
                         scope_request=lambda user: asked.append(user) or True)
    assert asked == [True]  # the *user* manager, as upstream
    supervisor = os.path.join(scope, "murmur-supervisor")
    assert fs.procs(supervisor) == [MY_PID] and fs.procs(scope) == []
    assert group.dirs == {"unified": os.path.join(scope, "murmur-ses_4")}
    assert fs.content(os.path.join(scope, "cgroup.subtree_control")).split() == ["cpu", "io", "memory", "pids"]
    assert fs.content(os.path.join(scope, "murmur-ses_4", "pids.max")) == "32"
    # a second session of the same process finds itself in the supervisor and reuses the scope
    where["path"] = "/user.slice/mur-1.scope/murmur-supervisor"
    second = cg.create_v2("ses_5", LIMITS, mounts_text=mounts(root), self_cgroup_text=self_cgroup,
                          is_root=False, systemd=False, workdir_dev=None, fs=fs)
    assert second.dirs == {"unified": os.path.join(scope, "murmur-ses_5")}
    group.remove()
    second.remove()
    assert os.path.isdir(scope)  # never remove the scope systemd gave us


def test_no_delegation_is_refused_with_the_reason(tmp_path):
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root, root_enabled="memory pids")  # cpu not delegated below the root
    fs.mkdir(os.path.join(root, "user.slice"))
    fs.add_proc(os.path.join(root, "user.slice"), MY_PID)
    with pytest.raises(cg.CgroupUnavailable, match="cpu not delegated"):
        cg.create_v2("ses_6", LIMITS, mounts_text=mounts(root), self_cgroup_text=lambda: "0::/user.slice\n",
                     is_root=False, systemd=False, workdir_dev=None, fs=fs)
    assert not os.path.exists(os.path.join(root, "user.slice", "murmur-ses_6"))


def test_root_at_a_namespace_root_without_cpu_is_refused_with_the_reason(tmp_path):
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root, controllers="memory pids")  # e.g. a container's namespace root without cpu
    with pytest.raises(cg.CgroupUnavailable) as info:
        cg.create_v2("ses_7", LIMITS, mounts_text=mounts(root), self_cgroup_text=lambda: "0::/\n",
                     is_root=True, systemd=False, workdir_dev=None, fs=fs)
    assert "root-level" in str(info.value) and "cpu not available" in str(info.value)


def test_root_in_a_delegated_unit_nests_there_and_moves_every_process_out_of_the_base(tmp_path):
    """A systemd unit with Delegate= (or mur's supervisor subtree): the session cgroup goes under it, so
    stopping the unit also reaches a session whose `mur run` was killed; v2's no-internal-process rule
    needs every process of the base (not just this one) moved to a leaf first."""
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root, root_enabled="cpu io memory pids")
    unit = os.path.join(root, "system.slice", "mur-dep.service")
    fs.mkdir(os.path.join(root, "system.slice"))
    fs.write(os.path.join(root, "system.slice", "cgroup.subtree_control"), "+cpu +io +memory +pids")
    fs.mkdir(unit)
    fs.add_proc(unit, MY_PID)
    fs.add_proc(unit, MY_PID + 1)  # e.g. a helper process of the same service
    group = cg.create_v2("ses_9", LIMITS, mounts_text=mounts(root), self_cgroup_text=lambda: "0::/system.slice/mur-dep.service\n",
                         is_root=True, systemd=True, workdir_dev=None, fs=fs)
    assert group.dirs == {"unified": os.path.join(unit, "murmur-ses_9")}
    assert sorted(fs.procs(os.path.join(unit, "murmur-supervisor"))) == [MY_PID, MY_PID + 1]
    assert fs.procs(unit) == []
    assert not os.path.exists(os.path.join(root, "mur"))
    group.remove()


def test_evidence_reads_v2_counters(tmp_path):
    root = str(tmp_path / "cgroup")
    fs = FakeCgroupFS(root)
    group = cg.create_v2("ses_8", LIMITS, mounts_text=mounts(root), self_cgroup_text=lambda: "0::/\n",
                         is_root=True, systemd=False, workdir_dev=None, fs=fs)
    path = group.dirs["unified"]
    assert group.evidence() == (0, 0)
    with open(os.path.join(path, "memory.events"), "w") as fh:
        fh.write("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    with open(os.path.join(path, "pids.events"), "w") as fh:
        fh.write("max 3\n")
    assert group.evidence() == (1, 3)
    group.remove()


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n", "unified"),
        ("tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\n"
         "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n", "hybrid"),
        ("tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\n", "legacy"),
        ("proc /proc proc rw 0 0\n", "none"),
    ],
)
def test_detect_mode(text, mode):
    assert cg.detect_mode(text) == mode


def test_discovery_helpers():
    text = ("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
            "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    roots = cg.v1_controller_roots(text)
    assert roots["cpu"] == roots["cpuacct"] == "/sys/fs/cgroup/cpu,cpuacct"
    assert roots["memory"] == "/sys/fs/cgroup/memory" and "pids" not in roots
    assert cg.v2_mountpoint(text) == "/sys/fs/cgroup/unified"
    assert cg.self_v2_path("4:memory:/x\n0::/user.slice/a.scope\n") == "/user.slice/a.scope"
    assert cg.self_v2_path("4:memory:/x\n") is None


def test_systemd_scope_request_shape():
    calls = []

    class Done:
        returncode = 0

    def run(argv, **kw):
        calls.append(argv)
        return Done()

    if not shutil.which("busctl"):
        assert cg.request_systemd_scope(True, run=run) is False
        return
    assert cg.request_systemd_scope(True, run=run) is True
    argv = calls[0]
    assert "--user" in argv and "StartTransientUnit" in argv
    assert argv[argv.index("Delegate") + 1 : argv.index("Delegate") + 3] == ["b", "true"]


def test_v1_delegation_is_our_own_cgroups_when_our_uid_owns_them():
    roots = {"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu,cpuacct",
             "cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "freezer": "/sys/fs/cgroup/freezer"}
    text = "5:memory:/svc\n4:pids:/svc\n3:cpu,cpuacct:/svc\n2:freezer:/\n1:name=systemd:/svc\n0::/\n"
    owned = {"/sys/fs/cgroup/memory/svc": 1000, "/sys/fs/cgroup/pids/svc": 1000, "/sys/fs/cgroup/cpu,cpuacct/svc": 1000}
    bases = cg.delegated_v1_bases(text, roots, 1000, owner=lambda p: owned.get(p, 0))
    assert bases == {"/sys/fs/cgroup/memory": "/sys/fs/cgroup/memory/svc", "/sys/fs/cgroup/pids": "/sys/fs/cgroup/pids/svc",
                     "/sys/fs/cgroup/cpu,cpuacct": "/sys/fs/cgroup/cpu,cpuacct/svc"}
    # one required controller not delegated (owned by root), or at its root: no delegation at all
    assert cg.delegated_v1_bases(text, roots, 1000, owner=lambda p: 0 if "pids" in p else 1000) is None
    assert cg.delegated_v1_bases(text.replace("4:pids:/svc", "4:pids:/"), roots, 1000, owner=lambda p: 1000) is None
