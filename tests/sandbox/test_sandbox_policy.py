"""ShellPolicy as data: what the manifest and the host measurements turn into."""

from __future__ import annotations

import errno
import socket

import pytest

from mur.manifest.capsule import Capabilities
from mur.manifest.network import parse_allow_list
from mur.sandbox import landlock as ll
from mur.sandbox import policy as pol
from mur.sandbox.probe import classify

FULL = classify("linux", 7, True, None, "hybrid", True, False)
WORKDIR = "/srv/capsule/workdir/ses_1"
BASH = ("/usr/bin/bash", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/libc.so.6")


def caps(**data) -> Capabilities:
    data.setdefault("shell", {"allow": ["bash"]})
    return Capabilities.model_validate(data, strict=False)


def build(c: Capabilities, probe=FULL, *, tcp=pol.TcpPlan(()), is_root=False, baseline=7, hard=None,
          existing=lambda p: True, closures=None) -> pol.ShellPolicy:
    return pol.build_policy(c, WORKDIR, probe, closures=closures if closures is not None else {"bash": BASH},
                            tcp=tcp, is_root=is_root, nproc_baseline=baseline, hard_limits=hard or {},
                            existing=existing)


def grant(policy: pol.ShellPolicy, path: str) -> pol.PathGrant:
    return next(g for g in policy.landlock.grants if g.path == path)


def test_workdir_is_read_write_without_execute_mknod_or_socket_creation():
    g = grant(build(caps()), WORKDIR)
    assert g.access & ll.WRITE_FILE and g.access & ll.READ_FILE and g.access & ll.MAKE_REG
    assert g.access & ll.REMOVE_FILE and g.access & ll.TRUNCATE and g.access & ll.REFER
    for bit in (ll.EXECUTE, ll.MAKE_CHAR, ll.MAKE_BLOCK, ll.MAKE_SOCK):
        assert not g.access & bit, ll.rights_names(bit)


def test_workdir_exec_adds_execute_only_when_declared():
    g = grant(build(caps(filesystem={"workdir_exec": True})), WORKDIR)
    assert g.access & ll.EXECUTE and not g.access & ll.MAKE_CHAR


def test_binaries_get_read_execute_on_exactly_their_closure():
    policy = build(caps())
    for path in BASH:
        g = grant(policy, path)
        assert g.access == ll.READ_FILE | ll.EXECUTE and g.reason == "binary bash"
    assert not any(g.path in ("/usr/bin", "/usr/lib", "/usr") for g in policy.landlock.grants)


def test_fixed_devices():
    policy = build(caps())
    assert grant(policy, "/dev/null").access & (ll.READ_FILE | ll.WRITE_FILE | ll.TRUNCATE) == (
        ll.READ_FILE | ll.WRITE_FILE | ll.TRUNCATE)
    assert grant(policy, "/dev/zero").access == ll.READ_FILE
    assert grant(policy, "/dev/urandom").access == ll.READ_FILE


def test_interpreter_runtime_list_dir_semantics():
    c = caps(shell={"allow": ["python3"], "interpreter_runtime": [{"binary": "python3", "dirs": [
        {"path": "/usr/lib/python3.11", "list_dir": True},
        {"path": "/usr/lib/python3.11/lib-dynload", "list_dir": False}]}]})
    policy = build(c, closures={"python3": ("/usr/bin/python3.11",)})
    assert grant(policy, "/usr/lib/python3.11").access == ll.EXECUTE | ll.READ_FILE | ll.READ_DIR
    assert grant(policy, "/usr/lib/python3.11/lib-dynload").access == ll.EXECUTE | ll.READ_FILE
    assert grant(policy, "/usr/lib/python3.11").reason == "interpreter_runtime python3"


def test_missing_paths_are_not_granted():
    c = caps(shell={"allow": ["bash"], "interpreter_runtime": [{"binary": "bash", "dirs": [
        {"path": "/nonexistent/lib", "list_dir": True}]}]})
    policy = build(c, existing=lambda p: not p.startswith("/nonexistent") and p != "/dev/urandom")
    paths = {g.path for g in policy.landlock.grants}
    assert "/nonexistent/lib" not in paths and "/dev/urandom" not in paths


@pytest.mark.parametrize(("abi", "net", "scoped", "truncate"), [
    (1, 0, 0, False), (3, 0, 0, True), (4, ll.NET_BIND_TCP | ll.NET_CONNECT_TCP, 0, True),
    (6, ll.NET_BIND_TCP | ll.NET_CONNECT_TCP, ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET, True),
    (7, ll.NET_BIND_TCP | ll.NET_CONNECT_TCP, ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET, True),
])
def test_abi_awareness(abi, net, scoped, truncate):
    probe = classify("linux", abi, True, None, "hybrid", True, False)
    policy = build(caps(), probe, tcp=pol.TcpPlan((443,)))
    ruleset = policy.landlock
    assert ruleset.abi == abi and ruleset.handled_fs == ll.fs_rights_for_abi(abi)
    assert ruleset.handled_net == net and ruleset.scoped == scoped
    assert ruleset.tcp_connect == ((443,) if abi >= 4 else ())
    assert bool(grant(policy, WORKDIR).access & ll.TRUNCATE) is truncate
    for g in ruleset.grants:
        assert g.access & ~ruleset.handled_fs == 0  # never a right the ABI does not know (EINVAL)


def test_tcp_plan_resolves_at_launch_and_skips_unresolvable_hosts():
    entries = parse_allow_list(["https://api.example.com", "localhost:11434", "http://nowhere.invalid:8080",
                                "127.0.0.1:9000"])
    plan = pol.plan_tcp(entries, resolve=lambda host: host != "nowhere.invalid")
    assert plan.ports == (443, 9000, 11434)
    assert plan.skipped == ("nowhere.invalid",) and plan.any_port == ()


def test_a_bare_host_entry_leaves_connect_unrestricted_but_bind_denied():
    plan = pol.plan_tcp(parse_allow_list(["example.com", "localhost:80"]), resolve=lambda h: True)
    assert plan.any_port == ("example.com",)
    policy = build(caps(), tcp=plan)
    assert policy.landlock.handled_net == ll.NET_BIND_TCP


def test_no_network_allow_means_no_tcp_at_all():
    policy = build(caps(), tcp=pol.plan_tcp([], resolve=lambda h: True))
    assert policy.landlock.handled_net == ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    assert policy.landlock.tcp_connect == ()


def test_seccomp_unix_sockets_refused_unless_granted():
    refused = build(caps()).seccomp
    unix_rules = {("socket", 0, socket.AF_UNIX, errno.EACCES), ("socketpair", 0, socket.AF_UNIX, errno.EACCES)}
    assert unix_rules <= set(refused.errno_arg_equal)
    granted = build(caps(network={"unix_sockets": True})).seccomp
    assert not unix_rules & set(granted.errno_arg_equal)
    for table in (refused, granted):  # netlink and packet: always
        assert ("socket", 0, socket.AF_NETLINK, errno.EACCES) in table.errno_arg_equal
        assert ("socket", 0, socket.AF_PACKET, errno.EACCES) in table.errno_arg_equal


def test_seccomp_refuses_the_escape_surface():
    table = build(caps()).seccomp
    refused = dict(table.errno_syscalls)
    for name in ("ptrace", "mount", "bpf", "keyctl", "unshare", "setns", "io_uring_setup", "perf_event_open"):
        assert refused[name] == errno.EPERM
    assert refused["clone3"] == errno.ENOSYS  # libc falls back to clone, whose flags we filter
    masks = {flag for name, _i, flag, value, _e in table.errno_arg_masked if name == "clone" and flag == value}
    assert 0x10000000 in masks and 0x40000000 in masks  # CLONE_NEWUSER, CLONE_NEWNET
    # an executable memfd would bypass Landlock's exec check: refused unless sealed non-executable
    assert ("memfd_create", 1, pol.MFD_NOEXEC_SEAL, 0, errno.EPERM) in table.errno_arg_masked
    relaxed = build(caps(filesystem={"workdir_exec": True})).seccomp
    assert not any(rule[0] == "memfd_create" for rule in relaxed.errno_arg_masked)


def test_rlimits_are_spec_defaults_with_nproc_as_headroom():
    limits = dict(build(caps(), baseline=40).rlimits)
    assert limits == {"NPROC": 168, "NOFILE": 1024, "FSIZE": 4 << 30, "CPU": 3600, "AS": 2 << 30, "CORE": 0}


def test_rlimits_are_clamped_to_the_inherited_hard_limit():
    c = caps(resources={"max_open_files": 50000, "cpu_seconds": 10})
    limits = dict(build(c, hard={"NOFILE": 20000, "CPU": -1}).rlimits)
    assert limits["NOFILE"] == 20000 and limits["CPU"] == 10


def test_cgroup_limits_come_from_resources():
    c = caps(resources={"cgroup_memory_bytes": 1 << 28, "cgroup_pids_max": 64, "cgroup_cpu_percent": 50})
    limits = build(c).cgroup
    assert (limits.memory_bytes, limits.pids_max, limits.cpu_percent) == (1 << 28, 64, 50)
    assert limits.io_bytes_per_sec == 100 << 20


def test_root_drops_to_nobody():
    assert build(caps(), is_root=True).run_as == (65534, 65534)
    assert build(caps(), is_root=False).run_as is None


def test_lesser_tiers():
    seccomp_only = build(caps(), classify("linux", 0, True, "no landlock", "hybrid", True, False))
    assert seccomp_only.tier == "seccomp-only" and seccomp_only.landlock is None and seccomp_only.seccomp
    mac = build(caps(), classify("darwin", 0, False, None, "none", False, False), is_root=True)
    assert mac.tier == "environment-only" and mac.landlock is None and mac.seccomp is None
    assert mac.cgroup is None and mac.run_as is None
    assert dict(mac.rlimits)["CORE"] == 0  # rlimits apply on every platform


def test_probe_classification():
    assert (FULL.tier, FULL.mechanism, FULL.achieved, FULL.reason) == ("full", "landlock+seccomp", "scoped", None)
    old = classify("linux", 0, True, "kernel too old", "legacy", True, False)
    assert (old.tier, old.mechanism, old.achieved) == ("seccomp-only", "seccomp-only", "advisory")
    assert old.reason.startswith("scoped requires Landlock filesystem mediation")
    mac = classify("darwin", 0, False, None, "none", False, False)
    assert (mac.tier, mac.mechanism, mac.achieved, mac.cgroup_mode) == ("environment-only", "none", "advisory", "none")
    no_seccomp = classify("linux", 7, False, None, "unified", True, True)
    assert no_seccomp.tier == "environment-only" and "seccomp" in no_seccomp.reason
    assert "sealed" not in {FULL.achieved, old.achieved, mac.achieved}


def test_explain_grants_skips_the_closure_and_dns():
    c = caps(shell={"allow": ["python3"], "interpreter_runtime": [{"binary": "python3", "dirs": [
        {"path": "/usr/lib/python3.11", "list_dir": False}]}]})
    grants = pol.explain_grants(c, WORKDIR)
    assert grants[0][0] == WORKDIR and "execute" not in grants[0][1] and "write_file" in grants[0][1]
    assert ("/usr/lib/python3.11", ["execute", "read_file"], "interpreter_runtime python3") in grants
    assert {"/dev/null", "/dev/zero", "/dev/urandom"} <= {g[0] for g in grants}
    assert not any(g[2].startswith("binary") for g in grants)
