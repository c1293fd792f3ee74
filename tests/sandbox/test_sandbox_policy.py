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


def ports(tcp: pol.TcpPlan, allow=("https://api.example.com",)) -> pol.NetworkPlan:
    mode = "none" if not tcp.ports and not tcp.any_port else "ports" if not tcp.any_port else "unfiltered"
    return pol.NetworkPlan(mode, tuple(parse_allow_list(list(allow))) if mode != "none" else (), tcp)


def build(c: Capabilities, probe=FULL, *, tcp=pol.TcpPlan(()), network=None, run_as=None, namespaces=(),
          baseline=7, hard=None, existing=lambda p: True, closures=None) -> pol.ShellPolicy:
    return pol.build_policy(c, WORKDIR, probe, closures=closures if closures is not None else {"bash": BASH},
                            network=network or ports(tcp), run_as=run_as, namespaces=namespaces,
                            nproc_baseline=baseline, hard_limits=hard or {}, existing=existing)


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
    policy = build(caps(), network=pol.plan_network([], lambda h: True, private_net=True, landlock_abi=7))
    assert policy.network.mode == "none" and not policy.network.inet
    assert policy.landlock.handled_net == ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    assert policy.landlock.tcp_connect == ()


ALLOW = parse_allow_list(["https://api.example.com", "localhost:11434", "http://nowhere.invalid:8080"])


@pytest.mark.parametrize(("private_net", "abi", "mode", "mechanism"), [
    (True, 7, "proxy", "netns+egress-proxy"), (True, 2, "proxy", "netns+egress-proxy"),
    (False, 7, "ports", "landlock-tcp-ports"), (False, 3, "unfiltered", "unfiltered-tcp"),
])
def test_network_mechanism_strongest_the_host_allows(private_net, abi, mode, mechanism):
    plan = pol.plan_network(ALLOW, lambda h: h != "nowhere.invalid", private_net=private_net, landlock_abi=abi)
    assert (plan.mode, plan.mechanism) == (mode, mechanism)
    assert [e.host for e in plan.allow] == ["api.example.com", "localhost"]  # DNS-failed hosts are skipped
    assert plan.tcp.skipped == ("nowhere.invalid",)


def test_nothing_resolving_is_no_network_at_all():
    plan = pol.plan_network(ALLOW, lambda h: False, private_net=True, landlock_abi=7)
    assert plan.mode == "none" and plan.allow == () and not plan.inet


def test_a_bare_host_entry_without_a_namespace_is_unfiltered():
    plan = pol.plan_network(parse_allow_list(["example.com"]), lambda h: True, private_net=False, landlock_abi=7)
    assert plan.mode == "unfiltered"


def test_in_the_proxy_mode_landlock_pins_the_proxy_port_and_tools_get_the_proxy_env():
    plan = pol.plan_network(ALLOW, lambda h: True, private_net=True, landlock_abi=7)
    policy = build(caps(), network=plan, namespaces=("net", "ipc", "mnt"))
    assert policy.landlock.handled_net == ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
    assert policy.landlock.tcp_connect == (pol.PROXY_PORT,)
    env = pol.proxy_env(plan)
    assert env["https_proxy"] == env["HTTPS_PROXY"] == env["http_proxy"] == f"http://127.0.0.1:{pol.PROXY_PORT}"
    assert "ALL_PROXY" in env and pol.proxy_env(pol.NetworkPlan("ports")) == {}


def test_the_tls_trust_store_is_readable_only_with_a_network_grant():
    with_net = build(caps(), network=pol.plan_network(ALLOW, lambda h: True, private_net=True, landlock_abi=7))
    assert grant(with_net, "/etc/ssl/certs").access == ll.READ_FILE | ll.READ_DIR
    without = build(caps())
    assert not any(g.path == "/etc/ssl/certs" for g in without.landlock.grants)


@pytest.mark.parametrize(("protocol", "host", "port", "allowed"), [
    ("https", "api.example.com", 443, True), ("https", "API.Example.COM.", 443, True),
    ("http", "api.example.com", 443, False),  # the entry pins https
    (None, "api.example.com", 443, False),  # opaque bytes need an entry without a scheme
    ("https", "api.example.com", 8443, False), ("https", "evil.example.com", 443, False),
    ("https", "api.example.com.evil.com", 443, False),
    (None, "localhost", 11434, True), ("http", "localhost", 11434, True), ("https", "localhost", 11435, False),
    ("http", "127.0.0.1", 11434, False),  # the pattern is the name, never what it resolves to
])
def test_egress_decisions(protocol, host, port, allowed):
    assert pol.egress_allowed(ALLOW, host, port, protocol) is allowed


def test_connect_target_check_admits_a_host_any_protocol_could_use():
    assert pol.egress_target_allowed(ALLOW, "api.example.com", 443)
    assert not pol.egress_target_allowed(ALLOW, "api.example.com", 80)
    assert not pol.egress_target_allowed(ALLOW, "other.example.com", 443)


def grant_families(g: pol.SocketGrant) -> set[int]:
    return {f for f, _t, _p in g.families}


def test_socket_allowlist_is_derived_from_the_grants():
    nothing = pol.socket_grant(unix=False, inet=False, private_net=True)
    assert nothing.families == () and not nothing.bind and not nothing.listen
    inet = pol.socket_grant(unix=False, inet=True, private_net=True)
    assert grant_families(inet) == {socket.AF_INET, socket.AF_INET6}
    assert all(types == (pol.SOCK_STREAM,) and protos == (0, pol.IPPROTO_TCP) for _f, types, protos in inet.families)
    unix = pol.socket_grant(unix=True, inet=False, private_net=False)
    assert grant_families(unix) == {socket.AF_UNIX} and unix.bind and unix.listen
    # listen() on an unbound TCP socket autobinds on every interface: only inside our own namespace
    assert not pol.socket_grant(unix=True, inet=True, private_net=False).listen
    assert pol.socket_grant(unix=True, inet=True, private_net=True).listen


def refused_socket(rules: list[pol.ArgRule], fam: int, typ: int, proto: int) -> bool:
    """Evaluate the refinement rules for socket(fam, typ, proto) as the kernel would."""
    args = (fam, typ, proto)

    def holds(cond) -> bool:
        index, op, value, mask = cond
        arg = args[index]
        return {"eq": arg == value, "ne": arg != value, "gt": arg > value,
                "masked_eq": (arg & mask) == value}[op]

    return any(r.syscall == "socket" and all(holds(c) for c in r.conditions) for r in rules)


@pytest.mark.parametrize(("fam", "typ", "proto", "unix", "inet", "refused"), [
    (socket.AF_INET, socket.SOCK_STREAM, 0, False, True, False),
    (socket.AF_INET6, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK, 6, False, True, False),
    (socket.AF_INET, socket.SOCK_STREAM, 0, False, False, True),  # no network grant: no inet at all
    (socket.AF_INET, socket.SOCK_STREAM, 262, False, True, True),  # IPPROTO_MPTCP
    (socket.AF_INET, socket.SOCK_STREAM, 132, False, True, True),  # IPPROTO_SCTP
    (socket.AF_INET, socket.SOCK_SEQPACKET, 0, False, True, True),  # SCTP
    (socket.AF_INET, socket.SOCK_DCCP if hasattr(socket, "SOCK_DCCP") else 6, 0, False, True, True),
    (socket.AF_INET, socket.SOCK_DGRAM, 0, False, True, True),  # UDP
    (socket.AF_INET, socket.SOCK_RAW, 1, False, True, True),
    (socket.AF_INET, socket.SOCK_STREAM, (1 << 32) | 6, False, True, True),  # high bits set: refused, not reread
    ((1 << 32) | socket.AF_INET, socket.SOCK_STREAM, 0, False, True, True),
    (socket.AF_UNIX, socket.SOCK_STREAM, 0, False, True, True),
    (socket.AF_UNIX, socket.SOCK_DGRAM, 0, True, False, False),
    (socket.AF_UNIX, socket.SOCK_STREAM, 1, True, False, True),
    (40, socket.SOCK_STREAM, 0, True, True, True),  # AF_VSOCK
    (16, socket.SOCK_RAW, 0, True, True, True), (17, socket.SOCK_RAW, 0, True, True, True),  # netlink, packet
    (38, socket.SOCK_SEQPACKET, 0, True, True, True), (44, socket.SOCK_RAW, 0, True, True, True),  # alg, xdp
    (31, socket.SOCK_STREAM, 0, True, True, True), (45, 1, 0, True, True, True), (200, 1, 0, True, True, True),
])
def test_socket_rules_refuse_exactly_the_complement(fam, typ, proto, unix, inet, refused):
    rules = pol.socket_rules(pol.socket_grant(unix=unix, inet=inet, private_net=True))
    assert refused_socket(rules, fam, typ, proto) is refused
    assert all(r.errno == errno.EACCES for r in rules)


def test_fastopen_and_autobind_listen_are_refused():
    rules = pol.socket_rules(pol.socket_grant(unix=False, inet=True, private_net=False))
    fastopen = {(r.syscall, r.conditions) for r in rules if r.syscall.startswith("send")}
    assert fastopen == {("sendto", ((3, "masked_eq", pol.MSG_FASTOPEN, pol.MSG_FASTOPEN),)),
                        ("sendmsg", ((2, "masked_eq", pol.MSG_FASTOPEN, pol.MSG_FASTOPEN),)),
                        ("sendmmsg", ((3, "masked_eq", pol.MSG_FASTOPEN, pol.MSG_FASTOPEN),))}
    assert pol.ArgRule("listen", errno.EACCES) in rules and pol.ArgRule("bind", errno.EACCES) in rules
    assert pol.ArgRule("socketpair", errno.EACCES) in rules  # unix_sockets: false


def test_seccomp_is_an_allowlist_with_a_default_errno():
    table = build(caps()).seccomp
    assert table.default_errno == errno.ENOSYS
    allowed, refused = set(table.allow), dict(table.refuse)
    assert {"read", "execve", "clone", "socket", "connect", "kill", "setpriority"} <= allowed
    for name in ("ptrace", "mount", "bpf", "keyctl", "unshare", "setns", "io_uring_setup", "perf_event_open",
                 "process_madvise", "pidfd_getfd", "process_vm_writev", "kcmp", "userfaultfd"):
        assert refused[name] == errno.EPERM and name not in allowed
    assert refused["clone3"] == errno.ENOSYS  # libc falls back to clone, whose flags we filter
    # never named: unknown and new syscalls get the default
    for name in ("socketcall", "ipc", "lsm_get_self_attr", "cachestat", "memfd_secret"):
        assert name not in allowed
    assert ("personality", 0, 0) in table.allow_if and ("personality", 0, 0x0400000) not in table.allow_if


def test_seccomp_refines_clone_memfd_and_terminal_injection():
    table = build(caps()).seccomp
    masked = {(r.syscall, r.conditions[0][2]) for r in table.rules if r.conditions and r.conditions[0][1] == "masked_eq"}
    assert ("clone", 0x10000000) in masked and ("clone", 0x40000000) in masked  # CLONE_NEWUSER, CLONE_NEWNET
    assert ("ioctl", pol.TIOCSTI) in masked
    # an executable memfd would bypass Landlock's exec check: refused unless sealed non-executable
    assert pol.ArgRule("memfd_create", errno.EPERM, ((1, "masked_eq", 0, pol.MFD_NOEXEC_SEAL),)) in table.rules
    relaxed = build(caps(filesystem={"workdir_exec": True})).seccomp
    assert not any(r.syscall == "memfd_create" for r in relaxed.rules)


def test_pid_targeting_calls_are_confined_unless_the_kernel_already_does_it():
    shared = build(caps())  # tools share mur's uid, no pid namespace
    assert shared.processes == "landlock-scope+seccomp"
    rules = {r.syscall: r for r in shared.seccomp.rules if r.syscall in pol.PID_FIRST}
    assert set(rules) == set(pol.PID_FIRST) and all(r.conditions == ((0, "ne", 0, 0),) for r in rules.values())
    assert pol.ArgRule("setpriority", errno.EPERM, ((1, "ne", 0, 0),)) in shared.seccomp.rules
    assert pol.ArgRule("kill", errno.EPERM, ((0, "masked_eq", pol.LOW32, pol.LOW32),)) in shared.seccomp.rules
    own_uid = build(caps(), run_as=(2053963777, 2053963777))
    assert own_uid.processes == "session-uid"
    assert not any(r.syscall in pol.PID_FIRST or r.syscall == "kill" for r in own_uid.seccomp.rules)
    # in a pid namespace the init still has the tools' uid: confined all the same
    pidns = build(caps(), namespaces=("user", "net", "ipc", "pid"))
    assert pidns.processes == "pid-namespace"
    assert {r.syscall for r in pidns.seccomp.rules} >= set(pol.PID_FIRST) | {"kill", "setpriority"}
    old = build(caps(), classify("linux", 2, True, None, "unified", True, True))
    assert old.processes == "seccomp-only"


@pytest.mark.parametrize(("root", "netns", "userns", "names"), [
    (True, True, False, ("net", "ipc", "mnt", "pid")),  # mnt for the read-only view, workdir_exec or not
    (False, True, True, ("user", "net", "ipc", "mnt", "pid")),
    (False, False, False, ()),
    (True, False, False, ()),
])
def test_namespaces_per_host(root, netns, userns, names):
    assert pol.plan_namespaces(is_root=root, private_net=netns, userns=userns) == names


def test_noexec_workdir_follows_the_mount_namespace():
    assert build(caps(), namespaces=("net", "ipc", "mnt")).noexec_workdir == WORKDIR
    assert build(caps(), namespaces=("net", "ipc")).noexec_workdir is None


def test_rlimits_are_spec_defaults_with_nproc_as_headroom():
    limits = dict(build(caps(), baseline=40).rlimits)
    assert limits == {"NPROC": 168, "NOFILE": 1024, "FSIZE": 4 << 30, "CPU": 3600, "AS": 2 << 30, "CORE": 1}


def test_rlimits_are_clamped_to_the_inherited_hard_limit():
    c = caps(resources={"max_open_files": 50000, "cpu_seconds": 10})
    limits = dict(build(c, hard={"NOFILE": 20000, "CPU": -1}).rlimits)
    assert limits["NOFILE"] == 20000 and limits["CPU"] == 10


def test_cgroup_limits_come_from_resources():
    c = caps(resources={"cgroup_memory_bytes": 1 << 28, "cgroup_pids_max": 64, "cgroup_cpu_percent": 50})
    limits = build(c).cgroup
    assert (limits.memory_bytes, limits.pids_max, limits.cpu_percent) == (1 << 28, 64, 50)
    assert limits.io_bytes_per_sec == 100 << 20


def test_the_session_uid_is_passed_through_on_linux_only():
    assert build(caps(), run_as=(2053963777, 2053963777)).run_as == (2053963777, 2053963777)
    assert build(caps()).run_as is None
    mac = build(caps(), classify("darwin", 0, False, None, "none", False, False), run_as=(5, 5))
    assert mac.run_as is None


def test_lesser_tiers():
    seccomp_only = build(caps(), classify("linux", 0, True, "no landlock", "hybrid", True, False))
    assert seccomp_only.tier == "seccomp-only" and seccomp_only.landlock is None and seccomp_only.seccomp
    mac = build(caps(), classify("darwin", 0, False, None, "none", False, False), run_as=(5, 5))
    assert mac.tier == "environment-only" and mac.landlock is None and mac.seccomp is None
    assert mac.cgroup is None and mac.run_as is None
    assert dict(mac.rlimits)["CORE"] == 1  # rlimits apply on every platform (1: no dump, even to a pipe)


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
