"""Hosts, not ports (issue 12, class 3): shell tools reach exactly the allowed hosts, through mur's
egress proxy in the session's private network namespace. Real curl, a real TLS server.

Two test names, ``allowed.test`` and ``other.test``, both resolve to 127.0.0.1 (the proxy's
injected resolver; bare controls use ``curl --resolve``), served by the same HTTPS and HTTP servers
on the same ports: only the name differs, so only a host check can tell them apart.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading

import pytest

from sbx_support import HOST_ENV, SYSTEM_PYTHON, HelloHandler, capabilities  # type: ignore[import-not-found]
from mur.sandbox.probe import probe_host

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

NAMES = {"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}
CURL = shutil.which("curl")
needs_curl = pytest.mark.skipif(CURL is None, reason="curl is not installed (the kernel-matrix VMs lack it)")


def refused_here() -> str:
    """What a connect() to a loopback port gets in the session's namespace: Landlock's EACCES where
    it has TCP rules (ABI >= 4), else the namespace's own ECONNREFUSED (nothing listens there)."""
    return "EACCES" if probe_host().landlock_abi >= 4 else "ECONNREFUSED"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(https port, http port, CA file): one certificate names both test hosts."""
    d = tmp_path_factory.mktemp("tls")
    ca, key, cert = d / "ca.pem", d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=mur test",
                    "-addext", "subjectAltName=DNS:allowed.test,DNS:other.test", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    shutil.copy(cert, ca)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    https = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HelloHandler)
    https.socket = ctx.wrap_socket(https.socket, server_side=True)
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HelloHandler)
    for srv in (https, plain):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield https.server_address[1], plain.server_address[1], ca
    for srv in (https, plain):
        srv.shutdown()
        srv.server_close()


def net_sandbox(sandbox, allow, **kw):
    caps = capabilities(allow=("bash", "curl", "python3"))
    return sandbox(caps, network_allow=allow, resolve=lambda host: NAMES.get(host, []), **kw)


def bare_curl(*args) -> subprocess.CompletedProcess:
    return subprocess.run([CURL, "-sS", "-m", "10", *args], capture_output=True, text=True, timeout=30, env=HOST_ENV)


@needs_curl
def test_curl_reaches_the_allowed_host_and_only_it(sandbox, servers, record_escape):
    tls, plain, ca = servers
    sb = net_sandbox(sandbox, [f"https://allowed.test:{tls}", f"http://allowed.test:{plain}"])
    shutil.copy(ca, sb.live_workdir / "ca.pem")
    ok = sb.run("curl", command=f"curl -sS -m 10 --cacert ca.pem https://allowed.test:{tls}/")
    assert ok.exit_code == 0 and ok.stdout == f"hello allowed.test:{tls}\n", ok.stderr
    ok_http = sb.run("curl", command=f"curl -sS -m 10 http://allowed.test:{plain}/")
    assert ok_http.exit_code == 0 and ok_http.stdout == f"hello allowed.test:{plain}\n", ok_http.stderr
    # the same server, the same port, another name: refused by the proxy
    other = sb.run("curl", command=f"curl -sS -m 10 --cacert ca.pem https://other.test:{tls}/")
    assert other.exit_code != 0 and "hello" not in other.stdout and "403" in other.stderr
    other_http = sb.run("curl", command=f"curl -sS -m 10 -f http://other.test:{plain}/")
    assert other_http.exit_code == 22 and "hello" not in other_http.stdout  # 403
    # the allowed host on a port it was not allowed on
    wrong_port = sb.run("curl", command=f"curl -sS -m 10 --cacert ca.pem https://allowed.test:{plain}/")
    assert wrong_port.exit_code != 0 and "hello" not in wrong_port.stdout
    refused = [d for d in sb.proxy.decisions if d[1].startswith("refused")]
    assert {d[0] for d in refused} >= {f"CONNECT other.test:{tls}", f"GET http://other.test:{plain}"}
    control = bare_curl("--cacert", str(ca), "--resolve", f"other.test:{tls}:127.0.0.1", f"https://other.test:{tls}/")
    assert control.returncode == 0 and control.stdout == f"hello other.test:{tls}\n"
    record_escape("curl another host on an allowed port", "proxy: 403 (CONNECT other.test)", "bare curl gets hello")


BYPASS = r'''
import errno, json, socket, sys
port, proxy = int(sys.argv[1]), int(sys.argv[2])
out = {}
for name, addr in (("loopback", ("127.0.0.1", port)), ("v6", ("::1", port)), ("lan", ("10.255.255.1", port)),
                   ("proxy_port_elsewhere", ("127.0.0.2", proxy))):
    try:
        s = socket.create_connection(addr, timeout=3); s.close(); out[name] = "connected"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e))
try:
    socket.getaddrinfo("allowed.test", 443); out["dns"] = "resolved"
except OSError as e:
    out["dns"] = "failed"
print(json.dumps(out))
'''


def test_raw_connects_bypassing_the_proxy_reach_nothing(sandbox, servers, record_escape):
    tls, _plain, _ca = servers
    sb = net_sandbox(sandbox, [f"https://allowed.test:{tls}"])
    r = sb.run("python3", args=["-c", BYPASS, str(tls), "3128"])
    got = json.loads(r.stdout)
    # Landlock admits only the proxy port; the namespace has nothing but loopback and the proxy
    assert got["loopback"] == got["v6"] == refused_here()
    assert got["lan"] in ("EACCES", "ENETUNREACH")
    assert got["proxy_port_elsewhere"] == "ECONNREFUSED"  # 127.0.0.2 is loopback too: nothing listens
    assert got["dns"] == "failed"  # no resolver reachable: names are the proxy's business
    bash = sb.run("bash", command=f"exec 3<>/dev/tcp/127.0.0.1/{tls} && echo connected")
    assert bash.exit_code != 0 and "connected" not in bash.stdout
    if CURL is not None:
        noproxy = sb.run("curl", command=f"curl -sS -m 5 --noproxy '*' -k https://allowed.test:{tls}/")
        assert noproxy.exit_code != 0 and "hello" not in noproxy.stdout
    control = subprocess.run([SYSTEM_PYTHON, "-c", BYPASS.replace('("lan", ("10.255.255.1", port)), ', ''),
                              str(tls), "3128"], capture_output=True, text=True, timeout=30)
    assert json.loads(control.stdout)["loopback"] == "connected"
    record_escape("raw connect around the proxy (tcp, bash, curl --noproxy)", "EACCES / no route", "connects bare")


SPOOF = r'''
import json, socket, ssl, sys
port, sni, host_header = int(sys.argv[1]), sys.argv[2], sys.argv[3]
out = {}
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(f"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n".encode())
out["connect"] = s.recv(100).decode().split("\r\n")[0]
ctx = ssl.create_default_context(cafile="ca.pem")
try:
    t = ctx.wrap_socket(s, server_hostname=sni)
    t.sendall(f"GET / HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while chunk := t.recv(4096):
        data += chunk
    out["reply"] = data.decode(errors="replace").split("\r\n\r\n", 1)[-1]
except (OSError, ssl.SSLError) as e:
    out["reply"] = type(e).__name__
print(json.dumps(out))
'''


def test_a_tunnel_to_an_allowed_host_cannot_front_another_name(sandbox, servers, record_escape):
    tls, plain, ca = servers
    sb = net_sandbox(sandbox, [f"https://allowed.test:{tls}", f"allowed.test:{plain}"])
    shutil.copy(ca, sb.live_workdir / "ca.pem")
    honest = json.loads(sb.run("python3", args=["-c", SPOOF, str(tls), "allowed.test", "allowed.test"]).stdout)
    assert honest == {"connect": "HTTP/1.1 200 Connection established", "reply": "hello allowed.test\n"}
    fronted = json.loads(sb.run("python3", args=["-c", SPOOF, str(tls), "other.test", "other.test"]).stdout)
    assert fronted["connect"].endswith("200 Connection established") and "hello" not in fronted["reply"]
    assert any("SNI 'other.test' differs" in d[1] for d in sb.proxy.decisions)
    # plain HTTP inside a CONNECT tunnel: the Host header must agree with the CONNECT host
    smuggle = sb.run("python3", args=["-c", (
        "import socket, sys\ns = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
        f"s.sendall(b'CONNECT allowed.test:{plain} HTTP/1.1\\r\\n\\r\\nGET / HTTP/1.1\\r\\nHost: other.test\\r\\n"
        "Connection: close\\r\\n\\r\\n')\nimport time; time.sleep(0.5)\nprint(s.recv(4096).decode())")])
    assert "200 Connection established" in smuggle.stdout and "hello" not in smuggle.stdout
    absolute = sb.run("python3", args=["-c", (
        "import socket\ns = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
        f"s.sendall(b'GET http://allowed.test:{plain}/ HTTP/1.1\\r\\nHost: other.test\\r\\n\\r\\n')\n"
        "print(s.recv(4096).decode())")])
    assert "hello" not in absolute.stdout and "403" in absolute.stdout and "Host header" in absolute.stdout
    # control: the server answers the fronted name when asked directly
    ctx = ssl.create_default_context(cafile=str(ca))
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls)), server_hostname="other.test") as t:
        t.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := t.recv(4096):
            reply += chunk
    assert b"hello other.test" in reply
    record_escape("domain fronting (SNI / Host) via an allowed tunnel", "tunnel closed, 403", "server answers")


def test_the_proxy_environment_and_no_proxy_override(sandbox, servers):
    tls, _plain, _ca = servers
    env = dict(HOST_ENV, NO_PROXY="allowed.test", no_proxy="*")
    sb = net_sandbox(sandbox, [f"https://allowed.test:{tls}"], host_env=env)
    r = sb.run("bash", command='echo "$https_proxy|$HTTPS_PROXY|$http_proxy|$ALL_PROXY|${NO_PROXY-unset}|${no_proxy-unset}"')
    url = "http://127.0.0.1:3128"
    assert r.stdout == f"{url}|{url}|{url}|{url}|unset|unset\n"


def test_without_a_network_grant_there_is_no_proxy(sandbox):
    sb = net_sandbox(sandbox, [])
    assert sb.proxy is None and sb.policy.network.mode == "none"
    r = sb.run("bash", command='echo "${https_proxy-unset}"; exec 3<>/dev/tcp/127.0.0.1/3128 && echo connected')
    assert r.stdout.startswith("unset\n") and "connected" not in r.stdout


def test_hosts_that_do_not_resolve_are_skipped(sandbox, servers):
    tls, _plain, _ca = servers
    notes: list[str] = []
    sb = net_sandbox(sandbox, [f"https://allowed.test:{tls}", "https://nowhere.test"], log=notes.append)
    assert [getattr(e, "host") for e in sb.policy.network.allow] == ["allowed.test"]
    assert any("nowhere.test" in n and "did not resolve" in n for n in notes)
    r = sb.run("python3", args=["-c", (
        "import socket\ns = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
        "s.sendall(b'CONNECT nowhere.test:443 HTTP/1.1\\r\\n\\r\\n')\nprint(s.recv(4096).decode())")])
    assert r.stdout.startswith("HTTP/1.1 403 ") and "hello" not in r.stdout


def test_as_another_user_the_proxy_is_the_only_way_out(unprivileged_user, servers, record_escape):
    """A non-root mur: an unprivileged user namespace carries the network namespace and the proxy."""
    from asuser import run_sessions  # type: ignore[import-not-found]

    from sbx_support import python_stdlib  # type: ignore[import-not-found]

    tls, plain, ca = servers
    caps = {"shell": {"allow": ["bash", "python3"] + (["curl"] if CURL else []), "interpreter_runtime": [
        {"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]}}
    calls = [
        [0, {"binary": "bash", "args": ["-c", 'printf "%s" "$1" > ca.pem', "x", ca.read_text()]}],
        [0, {"binary": "bash", "command": f"exec 3<>/dev/tcp/127.0.0.1/{tls} && echo connected"}],
        [0, {"binary": "python3", "args": ["-c", BYPASS, str(tls), "3128"]}],
        [0, {"binary": "python3", "args": ["-c", SPOOF, str(tls), "allowed.test", "allowed.test"]}],
        [0, {"binary": "python3", "args": ["-c", SPOOF.replace("allowed.test:{port}", "other.test:{port}"), str(tls),
                                           "other.test", "other.test"]}],
    ]
    if CURL:
        calls += [
            [0, {"binary": "curl", "command": f"curl -sS -m 10 --cacert ca.pem https://allowed.test:{tls}/"}],
            [0, {"binary": "curl", "command": f"curl -sS -m 5 --noproxy '*' -k https://127.0.0.1:{tls}/"}],
        ]
    out = run_sessions(unprivileged_user, {
        "names": NAMES, "sessions": [{"caps": caps, "network_allow": [f"https://allowed.test:{tls}"]}], "calls": calls})
    session = out["sessions"][0]
    assert session["network"] == "proxy" and "user" in session["namespaces"]
    raw, bypass, ok, other = session["results"][1:5]
    assert raw["exit_code"] != 0 and "connected" not in raw["stdout"]
    got = json.loads(bypass["stdout"])
    assert got["loopback"] == got["v6"] == refused_here() and got["lan"] in ("EACCES", "ENETUNREACH")
    assert json.loads(ok["stdout"]) == {"connect": "HTTP/1.1 200 Connection established",
                                        "reply": "hello allowed.test\n"}, ok
    assert json.loads(other["stdout"])["connect"].startswith("HTTP/1.1 403 "), other
    if CURL:
        curl_ok, noproxy = session["results"][5:]
        assert curl_ok["exit_code"] == 0 and curl_ok["stdout"] == f"hello allowed.test:{tls}\n", curl_ok["stderr"]
        assert noproxy["exit_code"] != 0 and "hello" not in noproxy["stdout"]
    control = subprocess.run([SYSTEM_PYTHON, "-c", BYPASS.replace('("lan", ("10.255.255.1", port)), ', ''),
                              str(tls), "3128"], capture_output=True, text=True, timeout=30)
    assert json.loads(control.stdout)["loopback"] == "connected"
    record_escape("non-root: other host / raw connect", "403 / refused (user+net namespace)", "bare curl works")
