"""Sockets Landlock does not see (issue 12, class 2): each attempt refused in the sandbox, beside the
same attempt succeeding bare. The socket policy is an allowlist by family, type and protocol.

One probe script runs every attempt and prints one JSON object, once inside the sandbox and once
bare (as root: the control for families only root may open, and for everything else too).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest

from escape_scripts import ATTEMPTS  # type: ignore[import-not-found]
from sbx_support import HOST_ENV, SYSTEM_PYTHON, capabilities, serving  # type: ignore[import-not-found]
from mur.sandbox.probe import classify, probe_host

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]


@pytest.fixture
def listener():
    """A loopback TCP listener that keeps what each connection sent."""
    got: list[bytes] = []

    def keep(conn):
        conn.settimeout(1)
        got.append(conn.recv(100))

    with serving(socket.create_server(("127.0.0.1", 0)), keep) as srv:
        yield srv.getsockname()[1], got


def run_attempts(sb, port: int) -> dict[str, str]:
    r = sb.run("python3", args=["-c", ATTEMPTS, str(port)])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def bare_attempts(port: int) -> dict[str, str]:
    r = subprocess.run([SYSTEM_PYTHON, "-c", ATTEMPTS, str(port)], capture_output=True, text=True, timeout=60,
                       env=HOST_ENV)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def no_netns_probe():
    """This host as one that cannot create a network namespace: Landlock's port rules carry network.allow."""
    return classify("linux", probe_host().landlock_abi, True, None, "hybrid", True, False, root=True, netns=False)


FAMILIES = ("mptcp", "udp", "icmp_raw", "vsock", "xdp", "netlink", "packet")  # open bare on this kernel
NOT_HERE = ("sctp", "sctp_stream", "smc_proto", "alg", "bluetooth")  # absent from this kernel: still EACCES


def test_no_network_grant_means_no_inet_socket_at_all(sandbox, listener, record_escape):
    port, _got = listener
    sb = sandbox()
    got = run_attempts(sb, port)
    control = bare_attempts(port)
    for name in ("tcp", "tcp6", "unix", "socketpair", *FAMILIES, *NOT_HERE):
        assert got[name] == "EACCES", (name, got[name])
    for name in ("tcp", "tcp6", "unix", "socketpair", *FAMILIES):
        assert control[name].startswith("ok:"), (name, control[name])
    record_escape("inet/unix/vsock/xdp/... sockets, no grant", "EACCES for every family", "root opens them all")


def test_a_network_grant_allows_tcp_and_nothing_else(sandbox, listener, record_escape):
    port, got_bytes = listener
    sb = sandbox(network_allow=["https://api.example.com"], resolve=lambda h: ["127.0.0.1"])
    got = run_attempts(sb, port)
    control = bare_attempts(port)
    assert got["tcp"] == got["tcp6"] == "ok:opened"
    for name in (*FAMILIES, *NOT_HERE, "unix", "socketpair"):
        assert got[name] == "EACCES", (name, got[name])
        if name not in NOT_HERE:
            assert control[name].startswith("ok:"), (name, control[name])
    record_escape("MPTCP/UDP/raw/vsock/xdp with TCP granted", "EACCES; TCP only", "each opens bare")


@pytest.mark.parametrize("mode", ["proxy", "ports"])
def test_connecting_or_listening_around_landlock_is_refused(sandbox, listener, record_escape, mode):
    """The allowed port is api.example.com's 443; the listener's port is not allowed in either mode."""
    port, got_bytes = listener
    kw = {"probe": no_netns_probe()} if mode == "ports" else {}
    sb = sandbox(network_allow=["https://api.example.com"], resolve=lambda h: ["127.0.0.1"], **kw)
    assert sb.policy.network.mode == mode
    got = run_attempts(sb, port)
    for name in ("sendto_fastopen", "sendmsg_fastopen", "listen_autobind", "bind"):
        assert got[name] == "EACCES", (name, got[name])
    assert got["io_uring"] == "EPERM"
    # connect()-based variants: Landlock (port rules) or the empty namespace refuses them
    for name in ("fastopen_connect", "v4mapped_connect"):
        assert got[name] in ("EACCES", "ECONNREFUSED"), (name, got[name])
    assert got_bytes == []  # nothing reached the listener
    control = bare_attempts(port)
    for name in ("sendto_fastopen", "sendmsg_fastopen", "fastopen_connect", "v4mapped_connect", "listen_autobind",
                 "bind"):
        assert control[name].startswith("ok:"), (name, control[name])
    assert control["listen_autobind"].startswith("ok:('0.0.0.0', ")  # every interface
    assert control["io_uring"] == "ok:ring"
    until = time.monotonic() + 5
    while got_bytes.count(b"fastopen\n") < 2 and time.monotonic() < until:
        time.sleep(0.05)
    assert got_bytes.count(b"fastopen\n") == 2  # the bare sendto/sendmsg really connected and delivered
    record_escape(f"fastopen/listen/bind/io_uring ({mode})", "EACCES / EPERM", "connects, listens on 0.0.0.0")


def test_as_another_user_the_socket_allowlist_holds(unprivileged_user, listener, record_escape):
    from asuser import bare_as, run_sessions  # type: ignore[import-not-found]
    from sbx_support import python_stdlib  # type: ignore[import-not-found]

    port, got_bytes = listener
    caps = {"shell": {"allow": ["python3"], "interpreter_runtime": [
        {"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]}}
    out = run_sessions(unprivileged_user, {"names": {"api.example.com": ["127.0.0.1"]}, "sessions": [
        {"caps": caps, "network_allow": ["https://api.example.com"]}],
        "calls": [[0, {"binary": "python3", "args": ["-c", ATTEMPTS, str(port)]}]]})
    got = json.loads(out["sessions"][0]["results"][0]["stdout"])
    assert got["tcp"] == "ok:opened"
    for name in ("mptcp", "udp", "vsock", "xdp", "unix", "socketpair", "sendto_fastopen", "sendmsg_fastopen",
                 "listen_autobind", "bind"):
        assert got[name] == "EACCES", (name, got[name])
    assert got["io_uring"] == "EPERM" and got_bytes == []
    control = json.loads(bare_as(unprivileged_user, [SYSTEM_PYTHON, "-c", ATTEMPTS, str(port)]).stdout)
    for name in ("mptcp", "udp", "vsock", "unix", "socketpair", "sendto_fastopen", "listen_autobind", "bind"):
        assert control[name].startswith("ok:"), (name, control[name])
    record_escape("non-root: MPTCP/UDP/vsock/fastopen/listen", "EACCES", "the same uid opens them bare")


ABSTRACT_CLIENT = ("import errno, socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
                   "    s.connect(sys.argv[1].encode().replace(b'@', b'\\0', 1)); print(s.recv(10).decode().strip())\n"
                   "except OSError as e:\n    print(errno.errorcode[e.errno])")


def test_a_hosts_abstract_unix_socket_is_out_of_reach_even_with_unix_sockets(sandbox, record_escape):
    """Abstract sockets have no file for Landlock to guard: the network namespace (and Landlock's
    ABI 6 scope) keep a tool with unix_sockets: true from the host's (X11, containerd, dbus ...)."""
    name = f"@mur-test-abstract-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(name.replace("@", "\0", 1).encode())
    srv.listen(4)
    with serving(srv, lambda conn: conn.sendall(b"pong\n")):
        sb = sandbox(capabilities(network={"unix_sockets": True}))
        r = sb.run("python3", args=["-c", ABSTRACT_CLIENT, name])
        assert r.stdout.strip() in ("ECONNREFUSED", "EPERM"), r.stdout + r.stderr
        control = subprocess.run([SYSTEM_PYTHON, "-c", ABSTRACT_CLIENT, name], capture_output=True, text=True,
                                 timeout=30, user=65534, group=65534, extra_groups=[])
        assert control.stdout == "pong\n"
    record_escape("a host abstract unix socket (unix_sockets: true)", r.stdout.strip(), "uid 65534 gets pong")
