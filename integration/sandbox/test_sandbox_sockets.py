"""Sockets Landlock does not see (issue 12, class 2): each attempt refused in the sandbox, beside the
same attempt succeeding bare. The socket policy is an allowlist by family, type and protocol.

One probe script runs every attempt and prints one JSON object, once inside the sandbox and once
bare (as root: the control for families only root may open, and for everything else too).
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time

import pytest

from sbx_support import HOST_ENV, SYSTEM_PYTHON, capabilities  # type: ignore[import-not-found]
from mur.sandbox.probe import classify, probe_host

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

ATTEMPTS = r'''
import ctypes, errno, json, socket, sys
port = int(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok:" + str(fn())
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def sock(fam, typ, proto=0):
    s = socket.socket(fam, typ, proto); s.close(); return "opened"
attempt("tcp", lambda: sock(2, 1))
attempt("tcp6", lambda: sock(10, 1, 6))
attempt("mptcp", lambda: sock(2, 1, 262))
attempt("sctp", lambda: sock(2, 5, 132))
attempt("sctp_stream", lambda: sock(2, 1, 132))
attempt("smc_proto", lambda: sock(2, 1, 256))
attempt("udp", lambda: sock(2, 2))
attempt("icmp_raw", lambda: sock(2, 3, 1))
attempt("vsock", lambda: sock(40, 1))
attempt("xdp", lambda: sock(44, 3))
attempt("netlink", lambda: sock(16, 3))
attempt("packet", lambda: sock(17, 3))
attempt("alg", lambda: sock(38, 5))
attempt("bluetooth", lambda: sock(31, 1))
attempt("unix", lambda: sock(1, 1))
attempt("socketpair", lambda: socket.socketpair() and "opened")
def fastopen():  # blocking: sendto() itself connects (no cookie yet: SYN, then the data)
    s = socket.socket(2, 1)
    s.sendto(b"fastopen\n", 0x20000000, ("127.0.0.1", port))
    return "sent"
attempt("sendto_fastopen", fastopen)
def sendmsg_fastopen():
    s = socket.socket(2, 1)
    s.sendmsg([b"fastopen\n"], [], 0x20000000, ("127.0.0.1", port))
    return "sent"
attempt("sendmsg_fastopen", sendmsg_fastopen)
def fastopen_connect():
    s = socket.socket(2, 1)
    s.setsockopt(6, 30, 1)  # TCP_FASTOPEN_CONNECT: connect() returns before the SYN
    s.settimeout(3)
    s.connect(("127.0.0.1", port)); s.sendall(b"x\n"); return "connected"
attempt("fastopen_connect", fastopen_connect)
def v4mapped():
    s = socket.socket(10, 1); s.settimeout(3); s.connect(("::ffff:127.0.0.1", port)); return "connected"
attempt("v4mapped_connect", v4mapped)
def listen_autobind():
    s = socket.socket(2, 1); s.listen(1); return s.getsockname()
attempt("listen_autobind", listen_autobind)
def bind_any():
    s = socket.socket(2, 1); s.bind(("0.0.0.0", 0)); return s.getsockname()
attempt("bind", bind_any)
libc = ctypes.CDLL(None, use_errno=True)
class Params(ctypes.Structure):
    _fields_ = [("pad", ctypes.c_uint32 * 30)]
def uring():
    fd = libc.syscall(425, 4, ctypes.byref(Params()))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")
    return "ring"
attempt("io_uring", uring)
print(json.dumps(out))
'''


@pytest.fixture
def listener():
    """A loopback TCP listener that counts the connections it accepted (and what they sent)."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    got: list[bytes] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    got.append(conn.recv(100))
                except OSError:
                    got.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1], got
    stop.set()
    thread.join(timeout=2)
    srv.close()


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
