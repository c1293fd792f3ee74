"""The enclosing cgroup as the aggregate bound (mur.sandbox.enclosing), from the kernel's file texts."""

from __future__ import annotations

from mur.sandbox.enclosing import EnclosingBound, find_in, parse_mountinfo, parse_proc_cgroup, unmet

# A Docker container on a cgroup v1 host (this CI's): each hierarchy's own cgroup mounted read-only.
V1_MOUNTINFO = """\
1028 1027 0:133 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
1031 1028 0:30 /docker/abc /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime master:13 - cgroup cgroup rw,memory
1032 1028 0:31 /docker/abc /sys/fs/cgroup/pids ro,nosuid,nodev,noexec,relatime master:14 - cgroup cgroup rw,pids
1033 1028 0:32 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
"""
V1_CGROUP = "12:pids:/docker/abc\n11:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/docker/abc\n"
# A pod on cgroup v2 with a private cgroup namespace: its own cgroup is the mount's root.
V2_MOUNTINFO = "1100 1099 0:35 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
V2_CGROUP = "0::/\n"


def reader(files: dict[str, str]):
    return lambda path: files.get(path)


def test_a_v1_container_s_own_cgroup_is_found_under_its_mounts():
    files = {"/sys/fs/cgroup/memory/cgroup.procs": "1\n", "/sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n",
             "/sys/fs/cgroup/pids/cgroup.procs": "1\n", "/sys/fs/cgroup/pids/pids.max": "128\n"}
    bound = find_in(parse_mountinfo(V1_MOUNTINFO), parse_proc_cgroup(V1_CGROUP), read=reader(files),
                    writable=lambda p: True, is_root=False)
    assert bound == EnclosingBound(1, "/sys/fs/cgroup/memory", 256 << 20, "/sys/fs/cgroup/memory",
                                   "/sys/fs/cgroup/pids", 128, readonly=True)
    assert bound.shortfall(256 << 20, 128) is None
    assert "above capabilities.resources.cgroup_memory_bytes (1048576)" in bound.shortfall(1 << 20, 128)
    assert "bounds tasks at 128, above capabilities.resources.cgroup_pids_max (64)" in bound.shortfall(1 << 30, 64)


def test_a_v2_pod_without_pids_max_leaves_tasks_to_rlimit_nproc():
    files = {"/sys/fs/cgroup/cgroup.procs": "1\n", "/sys/fs/cgroup/memory.max": "536870912\n",
             "/sys/fs/cgroup/pids.max": "max\n"}
    bound = find_in(parse_mountinfo(V2_MOUNTINFO), parse_proc_cgroup(V2_CGROUP), read=reader(files),
                    writable=lambda p: False, is_root=True)  # read-only: even root's tools cannot change it
    assert bound is not None and bound.version == 2 and bound.memory_bytes == 512 << 20
    assert bound.pids_max is None and bound.pids_dir is None
    assert "no pids.max (RLIMIT_NPROC bounds tasks)" in bound.describe()


def test_the_smallest_limit_on_the_path_to_the_mounted_root_counts():
    mountinfo = "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
    files = {"/sys/fs/cgroup/a/b/cgroup.procs": "7\n", "/sys/fs/cgroup/a/b/memory.max": "max\n",
             "/sys/fs/cgroup/a/memory.max": "1073741824\n", "/sys/fs/cgroup/memory.max": None}
    bound = find_in(parse_mountinfo(mountinfo), parse_proc_cgroup("0::/a/b\n"), read=reader(files),
                    writable=lambda p: False, is_root=False)
    assert bound is not None and (bound.memory_dir, bound.oom_dir) == ("/sys/fs/cgroup/a", "/sys/fs/cgroup/a/b")
    assert not bound.readonly


def test_no_bound_without_a_memory_limit_or_when_it_could_be_changed():
    files = {"/sys/fs/cgroup/memory/cgroup.procs": "1\n",
             "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}  # v1's "unlimited"
    mounts, own = parse_mountinfo(V1_MOUNTINFO), parse_proc_cgroup(V1_CGROUP)
    assert find_in(mounts, own, read=reader(files), writable=lambda p: False, is_root=False) is None
    rw = V2_MOUNTINFO.replace(" ro,", " rw,")
    files = {"/sys/fs/cgroup/cgroup.procs": "1\n", "/sys/fs/cgroup/memory.max": "1048576\n"}
    assert find_in(parse_mountinfo(rw), parse_proc_cgroup(V2_CGROUP), read=reader(files),
                   writable=lambda p: p.endswith("cgroup.procs"), is_root=False) is None  # could move itself out
    assert find_in(parse_mountinfo(rw), parse_proc_cgroup(V2_CGROUP), read=reader(files), writable=lambda p: False,
                   is_root=True) is None  # root on a writable cgroupfs: never "cannot change"
    assert find_in(parse_mountinfo(rw), parse_proc_cgroup(V2_CGROUP), read=reader(files), writable=lambda p: False,
                   is_root=False) is not None


def test_unmet_reads_the_probe_s_json_form():
    bound = EnclosingBound(2, "/sys/fs/cgroup", 1 << 30, "/sys/fs/cgroup", None, None, True)
    from dataclasses import asdict

    assert unmet(asdict(bound), 1 << 30, 256) is None
    assert unmet(asdict(bound), 1 << 29, 256).startswith("the cgroup mur runs in (/sys/fs/cgroup) bounds memory")
    assert unmet(None, 1, 1) == "and the cgroup mur runs in has no memory limit it could not change"
