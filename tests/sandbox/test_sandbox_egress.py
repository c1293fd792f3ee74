"""The egress proxy's parsing (pure): CONNECT authorities, request heads, TLS ClientHello SNI."""

from __future__ import annotations

import pytest

from mur.sandbox import egress
from mur.testing.sockets import client_hello


@pytest.mark.parametrize(("text", "want"), [
    ("api.example.com:443", ("api.example.com", 443)),
    ("API.Example.com:8443", ("api.example.com", 8443)),
    ("127.0.0.1:80", ("127.0.0.1", 80)),
    ("0x7f.1:80", ("127.0.0.1", 80)),  # canonical form, as the allow-list matcher sees it
    ("[::1]:443", ("::1", 443)),
])
def test_split_authority(text, want):
    assert egress.split_authority(text) == want


@pytest.mark.parametrize("text", [
    "api.example.com", "api.example.com:", "api.example.com:0", "api.example.com:65536", "a:b",
    "user@api.example.com:443", "api.example.com:443@evil.com:443", "::1:443", "[::1", "",
    "evil.com/x:443", "a b:443",
])
def test_split_authority_refuses_what_is_not_one(text):
    with pytest.raises(ValueError):
        egress.split_authority(text)


def test_default_port_for_absolute_form_urls():
    assert egress.split_authority("example.com", default_port=80) == ("example.com", 80)


def test_parse_head():
    head = b"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/7.88"
    method, target, version, headers = egress.parse_head(head)
    assert (method, target, version) == ("GET", "http://example.com/x", "HTTP/1.1")
    assert egress.header(headers, "host") == ["example.com"] and egress.header(headers, "user-agent") == ["curl/7.88"]
    for bad in (b"GET /", b"GET / HTTP/2", b"GET / HTTP/1.1\r\nno-colon", b"GET / HTTP/1.1\r\n Folded: x"):
        with pytest.raises(ValueError):
            egress.parse_head(bad)


def test_sni_from_a_real_client_hello():
    hello = client_hello("api.example.com")
    total = egress.tls_record_length(hello)
    assert total is not None and total <= len(hello)
    assert egress.client_hello_sni(hello[:total]) == "api.example.com"


def test_no_sni_when_the_client_sends_none():
    hello = client_hello(None)
    assert egress.client_hello_sni(hello[: egress.tls_record_length(hello)]) is None


def test_not_tls_and_truncated_hellos():
    assert egress.tls_record_length(b"GET / HTTP/1.1\r\n") is None
    assert egress.tls_record_length(b"\x16\x03") is None  # header incomplete
    hello = client_hello("api.example.com")
    with pytest.raises(ValueError):
        egress.client_hello_sni(hello[:60])


def test_same_host_normalizes():
    assert egress.same_host("API.example.com.", "api.example.com")
    assert not egress.same_host("api.example.com", "api.example.com.evil.com")


@pytest.mark.parametrize(("address", "scope"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"), ("169.254.169.254", "link-local"),
    ("fe80::1%eth0", "link-local"), ("10.1.2.3", "private"), ("fd00::1", "private"), ("0.0.0.0", "reserved"),
    ("93.184.216.34", "global"), ("2606:4700::1", "global"), ("not-an-ip", "reserved"),
])
def test_address_scope(address, scope):
    assert egress.address_scope(address) == scope


def test_a_name_rebound_to_loopback_is_refused_one_that_always_was_is_not():
    """DNS rebinding: `rebind.test` was public at launch and now answers 127.0.0.1 (the host's own
    services, from mur's namespace): 403. Control: `local.test`, loopback at launch too, connects."""
    import socket
    import threading

    from mur.manifest.network import parse_allow_list

    upstream = socket.create_server(("127.0.0.1", 0))
    port = upstream.getsockname()[1]
    reached: list[int] = []

    def serve_once() -> None:
        # Only local.test may arrive: one accept, bounded, so the thread ends before the test does
        # (a thread left blocked in accept() on a socket the test closes fails a later test).
        upstream.settimeout(10)
        try:
            conn, _ = upstream.accept()
        except OSError:
            return
        with conn:
            reached.append(1)
            conn.sendall(b"hello")

    server = threading.Thread(target=serve_once, daemon=True)
    server.start()
    launch = {"rebind.test": ["93.184.216.34"], "local.test": ["127.0.0.1"]}
    now = {"rebind.test": ["127.0.0.1"], "local.test": ["127.0.0.1"]}
    answers = launch
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = egress.EgressProxy(listener, parse_allow_list([f"rebind.test:{port}", f"local.test:{port}"]),
                               resolve=lambda host: answers.get(host, []))
    proxy.start()  # the launch answers (only their scopes are kept; the public address is never dialled)
    answers = now
    try:
        def connect(host: str) -> bytes:
            with socket.create_connection(listener.getsockname(), timeout=5) as c:
                c.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
                return c.recv(4096)

        refused = connect("rebind.test")
        assert refused.startswith(b"HTTP/1.1 403") and b"DNS rebinding" in refused, refused
        assert connect("local.test").startswith(b"HTTP/1.1 200")
        assert any("DNS rebinding" in d for _, d in proxy.decisions)
        server.join(10)
        assert reached == [1], "the rebound name must never reach the upstream; the loopback one once"
    finally:
        proxy.close()
        server.join(10)
        upstream.close()
