"""Decide, then apply: the session's whole sandbox as one pure value (mur.sandbox.decide), with its
parts -- the tools' view (viewplan) and the disk ceiling (diskplan) -- asserted as data."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mur.manifest.capsule import Capabilities
from mur.manifest.network import parse_allow_list
from mur.sandbox import decide as dec
from mur.sandbox.diskplan import DiskFacts, image_size, inode_limit, plan_disk
from mur.sandbox.probe import classify
from mur.sandbox.viewplan import Chain, plan_view

WORKDIR = "/srv/capsule/workdir/ses_1/work"
LOGS = "/srv/capsule/workdir/ses_1/logs"
GiB = 1 << 30


class View:
    sealed, sealed_reason, disk_loop, disk_tmpfs, disk_reason = True, None, True, True, None


class NoLoop(View):
    disk_loop, disk_reason = False, "no loop device here"


ROOT_SEALED = classify("linux", 7, True, None, "hybrid", True, False, root=True, netns=True, view=View())
USER_SEALED = classify("linux", 6, True, None, "unified", True, False, root=False, netns=True, userns=True,
                       view=NoLoop())
USER_BARE = classify("linux", 5, True, None, "hybrid", True, False, root=False, netns=False, userns=False)


def caps(**data) -> Capabilities:
    data.setdefault("shell", {"allow": ["bash"]})
    return Capabilities.model_validate(data, strict=False)


# The host as measured: bash's closure as the loader names it (/lib64, libtinfo.so.6 links).
LINKS = {
    "/lib64": "usr/lib64", "/usr/lib64/ld-linux-x86-64.so.2": "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/lib": "usr/lib", "/usr/lib/x86_64-linux-gnu/libtinfo.so.6": "libtinfo.so.6.4", "/bin": "usr/bin",
}
REAL = {"/usr/bin/bash", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libtinfo.so.6.4", "/usr/lib/python3.11", "/usr/lib/locale", "/dev/null",
        "/dev/zero", "/dev/urandom", "/dev/full", "/dev/random", "/usr/bin", LOGS}


def chains(path: str) -> Chain | None:
    """How a path resolves on the pretend host (what viewplan.measure_chain measures)."""
    import os

    links: list[tuple[str, str]] = []
    parts = [p for p in path.split("/") if p]
    resolved = "/"
    while parts:
        here = os.path.join(resolved, parts.pop(0))
        if here in LINKS:
            links.append((here, LINKS[here]))
            text = LINKS[here]
            resolved = "/" if text.startswith("/") else resolved
            parts = [p for p in text.split("/") if p] + parts
            continue
        resolved = os.path.normpath(here)
    if resolved not in REAL and not any(r.startswith(resolved + "/") for r in REAL):
        return None
    return Chain(tuple(links), resolved, resolved in ("/usr/lib/python3.11", "/usr/lib/locale", "/usr/bin", LOGS)
                 or any(r.startswith(resolved + "/") for r in REAL))


NAMED = ("/usr/bin/bash", "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libtinfo.so.6",
         "/lib/x86_64-linux-gnu/libc.so.6")
CLOSURE = ("/usr/bin/bash", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
           "/usr/lib/x86_64-linux-gnu/libtinfo.so.6.4", "/usr/lib/x86_64-linux-gnu/libc.so.6")


def facts(probe=ROOT_SEALED, **kw) -> dec.SessionFacts:
    base = dict(readonly=(LOGS,), closures={"bash": CLOSURE}, named={"bash": NAMED}, run_as=(7, 7),
                chains=chains, path_dirs=("/usr/bin", "/bin"), memory_total=24 * GiB,
                existing=lambda p: chains(p) is not None)
    base.update(kw)
    return dec.SessionFacts(probe, WORKDIR, bool(probe.root), **base)


def decide(c=None, f=None, allow=()):
    return dec.decide(c or caps(), parse_allow_list(list(allow)), f or facts())


def targets(policy, kind):
    return {m.target: m for m in policy.view.steps if m.kind == kind}


# --- the whole value --------------------------------------------------------------------------


def test_as_root_on_a_sealed_host_the_tools_get_a_composed_root_on_an_ext4_disk():
    p = decide()
    assert p.host_view == "composed-root" and p.view_reason is None
    assert p.mechanism == "mountns+pivot_root+landlock+seccomp"
    assert p.disk.mechanism == "ext4-loop" and p.disk.limit == 10 * GiB and p.disk.kernel
    assert p.disk.inodes == inode_limit(10 * GiB) and p.disk.image_bytes > 10 * GiB
    assert p.namespaces == ("net", "ipc", "mnt", "pid") and p.run_as == (7, 7)
    grants = {g.path: g.reason for g in p.landlock.grants}
    assert grants["/tmp"] == "private /tmp" and grants["/proc"] == "the session's /proc"


def test_the_decision_is_a_pure_value():
    assert decide() == decide()
    small = caps(resources={"workdir_max_bytes": 40 << 20})
    ram = decide(small, facts(USER_SEALED, run_as=None))
    assert ram.disk.mechanism == "tmpfs"  # only the facts change the decision: here the host's memory
    assert decide(small, facts(USER_SEALED, run_as=None, memory_total=1)).disk.mechanism == "watcher"


def test_the_view_shows_exactly_the_grants_with_the_links_the_loader_follows():
    p = decide()
    binds = targets(p, "bind")
    assert set(binds) == {"/usr/bin/bash", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                          "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libtinfo.so.6.4",
                          "/usr/lib/locale", LOGS}
    assert binds["/usr/bin/bash"].exec_ and not binds[LOGS].exec_ and not binds["/usr/lib/locale"].exec_
    links = {t: m.source for t, m in targets(p, "link").items()}
    assert links["/lib64"] == "usr/lib64" and links["/lib"] == "usr/lib" and links["/bin"] == "usr/bin"
    assert links["/usr/lib/x86_64-linux-gnu/libtinfo.so.6"] == "libtinfo.so.6.4"
    assert links["/dev/fd"] == "/proc/self/fd"
    assert set(targets(p, "device")) == {"/dev/null", "/dev/zero", "/dev/urandom", "/dev/full", "/dev/random"}
    assert targets(p, "work")[WORKDIR].exec_ is False and targets(p, "tmp")["/tmp"]
    assert "/etc" not in {m.target for m in p.view.steps}  # nothing else exists
    order = [m.target for m in p.view.steps]
    assert order.index("/usr") < order.index("/usr/bin") < order.index("/usr/bin/bash")  # parents first


def test_workdir_exec_keeps_exec_on_the_workdir_and_tmp_mounts():
    p = decide(caps(filesystem={"workdir_exec": True}))
    assert targets(p, "work")[WORKDIR].exec_ and targets(p, "tmp")["/tmp"].exec_ and p.disk.exec_


def test_a_workdir_under_tmp_gets_a_read_only_skeleton_inside_the_private_tmp():
    work = "/tmp/pytest-of-root/ses_1/work"
    f = replace(facts(), workdir=work, readonly=("/tmp/pytest-of-root/ses_1/logs",))
    p = dec.decide(caps(), [], f)
    skeletons = targets(p, "skeleton")
    assert set(skeletons) == {"/tmp/pytest-of-root"}  # a mount point: the tools cannot rename the way in
    order = [m.target for m in p.view.steps]
    assert order.index("/tmp") < order.index("/tmp/pytest-of-root") < order.index(work)


def test_as_a_user_the_disk_is_tmpfs_when_the_ceiling_fits_in_ram_else_the_watcher():
    small = decide(caps(resources={"workdir_max_bytes": 40 << 20}), facts(USER_SEALED, run_as=None))
    assert small.disk.mechanism == "tmpfs" and small.host_view == "composed-root" and "user" in small.namespaces
    big = decide(caps(), facts(USER_SEALED, run_as=None))  # 10 GiB > a quarter of 4 GiB of cgroup memory
    assert big.disk.mechanism == "watcher" and not big.disk.kernel
    assert "RAM-backed workdir" in big.disk.reason and "mur is not root" in big.disk.reason
    assert big.host_view == "composed-root"  # the view does not depend on the disk


def test_without_namespaces_there_is_no_view_and_the_reason_is_the_probes():
    p = decide(f=facts(USER_BARE, run_as=None))
    assert p.view is None and p.host_view == "host" and p.namespaces == ()
    assert "user namespaces" in p.view_reason or "mount namespace" in p.view_reason
    assert p.disk.mechanism == "watcher" and "no mount namespace" in p.disk.reason
    assert p.mechanism == "landlock+seccomp"


def test_an_applier_failure_is_a_new_decision():
    f = facts()
    assert decide(f=f.failing("disk-loop", "EBUSY: no free loop device")).disk.mechanism == "watcher"  # 10 GiB: RAM too small
    small = caps(resources={"workdir_max_bytes": 64 << 20})
    assert decide(small, f.failing("disk-loop", "x")).disk.mechanism == "tmpfs"
    no_view = decide(f=f.failing("view", "pivot_root: EINVAL"))
    assert no_view.view is None and no_view.host_view == "read-only-host" and "pivot_root: EINVAL" in no_view.view_reason
    assert no_view.disk.mechanism == "watcher"
    no_mnt = decide(f=f.failing("mnt", "bind refused"))
    assert "mnt" not in no_mnt.namespaces and no_mnt.host_view == "host"


def test_unix_sockets_true_keeps_the_host_view():
    p = decide(caps(network={"unix_sockets": True}))
    assert p.view is None and "unix_sockets" in p.view_reason and p.host_view == "read-only-host"


def test_explain_decides_with_the_same_function_and_no_side_effects():
    p = dec.decide(caps(), [], dec.explain_facts(ROOT_SEALED, workdir=WORKDIR))
    assert p.host_view == "composed-root" and p.disk.mechanism == "ext4-loop"
    assert not any(g.reason.startswith("binary") for g in p.landlock.grants)  # no closure resolved


# --- the disk ceiling ---------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [40 << 20, GiB, 10 * GiB])
def test_the_image_leaves_room_for_ext4_metadata(limit):
    inodes = inode_limit(limit)
    assert image_size(limit, inodes) >= limit + inodes * 256 + limit // 50


def test_plan_disk_mechanisms():
    f = DiskFacts(mount_ns=True, loop=True, tmpfs=True, memory_total=8 * GiB, memory_bound=4 * GiB)
    assert plan_disk(GiB, f, root=True).mechanism == "ext4-loop"
    assert plan_disk(GiB, f, root=False).mechanism == "tmpfs"
    assert plan_disk(2 * GiB, f, root=False).mechanism == "watcher"
    assert plan_disk(GiB, replace(f, mount_ns=False), root=True).mechanism == "watcher"
    assert plan_disk(GiB, replace(f, loop=False, tmpfs=False, why_not="EPERM"), root=True).reason == "EPERM"


# --- the view on its own ---------------------------------------------------------------------


def test_a_path_that_does_not_exist_is_left_out_and_noted():
    v = plan_view(WORKDIR, [("/opt/missing", "binary x")], chains=chains)
    assert "/opt/missing" not in {m.target for m in v.steps} and any("/opt/missing" in n for n in v.notes)


def test_paths_inside_a_bound_directory_are_not_bound_again():
    v = plan_view(WORKDIR, [("/usr/lib/python3.11", "interpreter_runtime python3"),
                            ("/usr/lib/python3.11/lib-dynload/x.so", "binary python3")],
                  chains=lambda p: Chain((), p, p.endswith("3.11")))
    assert [m.target for m in v.steps if m.kind == "bind"] == ["/usr/lib/python3.11"]
