"""The egress proxy against a hostile tool: request smuggling and floods, each beside a control.

The real proxy (mur.sandbox.egress.EgressProxy) on a loopback listener, real sockets, and real
upstream servers on 127.0.0.x that record every byte they receive. ``allowed.test`` and
``denied.test`` both resolve (through the proxy's injected resolver) to the same recording
upstream, so a denied name that slipped through would show up there: each attack asserts the
tool got a refusal or a closed tunnel *and* the upstream never saw the denied name, and each
control asserts the same upstream served the allowed request.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Iterator

import pytest

from mur.manifest.network import parse_allow_list
from mur.sandbox.egress import HEAD_LIMIT, EgressProxy
from mur.testing.sockets import client_hello

NAMES = {"allowed.test": ["127.0.0.1"], "denied.test": ["127.0.0.1"]}


class Upstream:
    """A loopback server that records what each connection sent; it answers every HTTP request it
    can frame with ``200`` and a body naming the request's Host (so the tool can see who served)."""

    def __init__(self, host: str = "127.0.0.1", *, read: bool = True) -> None:
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.read = read
        self.received: list[bytearray] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    @property
    def everything(self) -> bytes:
        with self._lock:
            return b"".join(bytes(r) for r in self.received)

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with self._lock:
                self.connections += 1
                buf = bytearray()
                self.received.append(buf)
            thread = threading.Thread(target=self._handle, args=(conn, buf), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _handle(self, conn: socket.socket, buf: bytearray) -> None:
        conn.settimeout(5)
        pending = b""
        with conn:
            if not self.read:  # a sink that never reads: the proxy must hold back, not buffer
                self._stop.wait(30)
                return
            try:
                while data := conn.recv(65536):
                    with self._lock:
                        buf.extend(data)
                    pending += data
                    while (answer := _one_request(pending)) is not None:
                        pending, host, close = answer
                        body = f"served {host}".encode()
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                        if close:
                            return
            except OSError:
                pass

    def wait_quiet(self, seconds: float = 0.3) -> None:
        """Until no connection handler is still running (bounded)."""
        deadline = time.monotonic() + 5
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        time.sleep(seconds)

    def close(self) -> None:
        self._stop.set()
        self._accepting.join(timeout=2)
        self.sock.close()


def _one_request(data: bytes) -> tuple[bytes, str, bool] | None:
    """(rest, Host, Connection: close?) when ``data`` starts with one whole HTTP request."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = data[:end].decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    rest = data[end + 4:]
    if fields.get("transfer-encoding", "").lower() == "chunked":
        last = rest.find(b"0\r\n\r\n")
        if last < 0:
            return None
        rest = rest[last + 5:]
    else:
        length = int(fields.get("content-length", "0") or 0)
        if len(rest) < length:
            return None
        rest = rest[length:]
    return rest, fields.get("host", ""), fields.get("connection", "").lower() == "close"


@contextlib.contextmanager
def proxy(allow: list[str], **options) -> Iterator[EgressProxy]:
    listener = socket.create_server(("127.0.0.1", 0))
    p = EgressProxy(listener, parse_allow_list(allow), resolve=lambda host: NAMES.get(host, []), **options)
    p.start()
    try:
        yield p
    finally:
        p.close()
        listener.close()


def address(p: EgressProxy) -> tuple[str, int]:
    return p.listener.getsockname()


def ask(p: EgressProxy, raw: bytes, *, timeout: float = 5, half_close: bool = True) -> bytes:
    """Send raw bytes to the proxy, then read until it closes."""
    with socket.create_connection(address(p), timeout=timeout) as c:
        c.sendall(raw)
        if half_close:
            with contextlib.suppress(OSError):  # a proxy that refused at once may be gone already
                c.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while data := c.recv(65536):
                out += data
        except (ConnectionResetError, socket.timeout):
            pass
        return out


def get(target: str, host: str, extra: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


@pytest.fixture
def up():
    server = Upstream()
    yield server
    server.close()


def status(reply: bytes) -> int:
    assert reply.startswith(b"HTTP/1.1 "), reply[:200]
    return int(reply[9:12])


# --- smuggling: absolute form, Host ---------------------------------------------------------------


def test_absolute_form_and_host_must_agree_both_ways(up):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a, d = f"allowed.test:{up.port}", f"denied.test:{up.port}"
        control = ask(p, get(f"http://{a}/x", a))
        assert status(control) == 200 and control.endswith(f"served {a}".encode())
        for target, host in ((a, d), (d, a), (d, d)):
            reply = ask(p, get(f"http://{target}/x", host))
            assert status(reply) == 403, (target, host, reply)
        up.wait_quiet()
        assert b"denied" not in up.everything and up.connections == 1


def test_two_host_headers_are_refused(up):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a, d = f"allowed.test:{up.port}", f"denied.test:{up.port}"
        for extra in (f"Host: {d}\r\n", f"Host: {a}\r\n", f"host: {d}\r\n"):
            assert status(ask(p, get(f"http://{a}/", a, extra))) == 403
        # inside a CONNECT tunnel too: the tunnel closes before a byte goes up
        raw = f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode() + get("/", a, f"Host: {d}\r\n")
        assert ask(p, raw) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        up.wait_quiet()
        assert b"denied" not in up.everything and up.everything == b""


@pytest.mark.parametrize("host", [
    "user@allowed.test:{port}", "allowed.test:{port}@denied.test", "denied.test:{port}#@allowed.test",
    "allowed.test%2e:{port}", "allowed%2Etest:{port}", "denied.test:{port}:{port}", "allowed.test:0{port}x",
    "allowed.tést:{port}", "allowed.test:{other}", "allowed.test", "ALLOWED.TEST.evil:{port}",
])
def test_host_header_tricks_are_refused(up, host):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a = f"allowed.test:{up.port}"
        raw = get(f"http://{a}/", host.format(port=up.port, other=up.port + 1)).decode().encode("utf-8")
        assert status(ask(p, raw)) in (400, 403)
        up.wait_quiet()
        assert up.connections == 0


@pytest.mark.parametrize("spelling", ["ALLOWED.test:{port}", "allowed.test.:{port}", "Allowed.Test.:{port}"])
def test_case_and_a_trailing_dot_are_the_same_allowed_host(up, spelling):
    """Control for the tricks above: the spellings URL parsers agree on are one host, and it is dialled."""
    with proxy([f"allowed.test:{up.port}"]) as p:
        s = spelling.format(port=up.port)
        reply = ask(p, get(f"http://{s}/", s))
        assert status(reply) == 200, reply
        connect = ask(p, f"CONNECT {s} HTTP/1.1\r\nHost: {s}\r\n\r\n".encode() + get("/", s, "Connection: close\r\n"))
        assert connect.startswith(b"HTTP/1.1 200 Connection established") and b"served" in connect, connect


@pytest.mark.parametrize("target", ["denied.test:{port}", "allowed.test:{port}.", "xn--allowed-test:{port}",
                                    "allowed.test%00:{port}", "allowed..test:{port}", "allowed.test :{port}"])
def test_connect_to_other_spellings_of_a_host_is_refused(up, target):
    with proxy([f"allowed.test:{up.port}"]) as p:
        t = target.format(port=up.port)
        reply = ask(p, f"CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n".encode())
        assert status(reply) in (400, 403), reply
        up.wait_quiet()
        assert up.connections == 0


# --- smuggling: TLS SNI ---------------------------------------------------------------------------


def test_connect_then_the_sni_of_another_host_is_cut_off(up):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a = f"allowed.test:{up.port}"
        connect = f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode()
        control_hello = client_hello("allowed.test")
        assert ask(p, connect + control_hello).startswith(b"HTTP/1.1 200")
        up.wait_quiet()
        assert up.everything == control_hello  # the control's ClientHello went up, whole
        for sni in ("denied.test", None, "allowed.test.denied.test"):
            assert ask(p, connect + client_hello(sni)) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        up.wait_quiet()
        assert up.everything == control_hello, "a refused ClientHello reached the upstream"
        verdicts = [v for _, v in p.decisions]
        assert sum("differs from the CONNECT host" in v for v in verdicts) == 2
        assert any("without SNI" in v for v in verdicts)


def test_a_clienthello_split_into_tiny_writes_is_still_read_whole(up):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a = f"allowed.test:{up.port}"
        with socket.create_connection(address(p), timeout=5) as c:
            c.sendall(f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode())
            assert c.recv(100).startswith(b"HTTP/1.1 200")
            for i, byte in enumerate(client_hello("denied.test")):
                c.send(bytes([byte]))
                if i < 8:
                    time.sleep(0.01)
            c.shutdown(socket.SHUT_WR)
            assert c.recv(100) == b""
        up.wait_quiet()
        assert up.everything == b""


# --- smuggling: keep-alive, framing, line endings ----------------------------------------------


def test_a_pipelined_second_request_to_a_denied_host_never_leaves(up):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a, d = f"allowed.test:{up.port}", f"denied.test:{up.port}"
        # absolute form: exactly one request goes upstream, the pipelined one is dropped
        reply = ask(p, get(f"http://{a}/1", a) + get(f"http://{d}/2", d))
        assert status(reply) == 200 and reply.count(b"HTTP/1.1 ") == 1
        # in a tunnel: the control (two allowed requests) is served twice; a denied second one cuts it
        connect = f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode()
        both = ask(p, connect + get("/1", a) + get("/2", a))
        assert both.count(b"served " + a.encode()) == 2, both
        cut = ask(p, connect + get("/1", a) + get("/2", d))
        assert b"denied" not in cut
        up.wait_quiet()
        assert b"denied" not in up.everything
        assert any("a later request's Host" in v for _, v in p.decisions)


@pytest.mark.parametrize("smuggle", [
    # CL.TE / TE.CL: the body the proxy counts hides a second request the upstream may read
    "Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{inner}",
    "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n{inner}",
    "Content-Length: {n}\r\nContent-Length: 0\r\n\r\n{inner}",
    "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{inner}",
    "Transfer-Encoding:\tchunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\n{inner}",
])
def test_conflicting_body_framing_is_refused(up, smuggle):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a, d = f"allowed.test:{up.port}", f"denied.test:{up.port}"
        inner = get(f"http://{d}/", d).decode()
        body = smuggle.format(n=len(inner) + 5, inner=inner)
        raw = f"POST http://{a}/ HTTP/1.1\r\nHost: {a}\r\n{body}".encode()
        assert status(ask(p, raw)) == 400
        connect = f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode()
        tunneled = ask(p, connect + f"POST / HTTP/1.1\r\nHost: {a}\r\n{body}".encode())
        assert tunneled == b"HTTP/1.1 200 Connection established\r\n\r\n"
        up.wait_quiet()
        assert up.connections == 1 and up.everything == b""  # only the tunnel's TCP connect


def test_a_chunked_body_is_relayed_by_its_framing_and_what_follows_is_checked(up):
    """Control: a chunked POST goes through whole; a request hidden after the last chunk is the next
    request, and its denied Host cuts the tunnel."""
    with proxy([f"allowed.test:{up.port}"]) as p:
        a, d = f"allowed.test:{up.port}", f"denied.test:{up.port}"
        chunked = f"POST / HTTP/1.1\r\nHost: {a}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        connect = f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode()
        assert b"served" in ask(p, connect + chunked.encode())
        assert b"served" in ask(p, f"POST http://{a}/ HTTP/1.1\r\nHost: {a}\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   f"5\r\nhello\r\n0\r\n\r\n".encode())
        ask(p, connect + chunked.encode() + get("/", d))
        lying = chunked.replace("5\r\nhello", "3\r\nhello")  # a chunk longer than its size
        ask(p, connect + lying.encode())
        up.wait_quiet()
        assert b"denied" not in up.everything and up.everything.count(b"hello") == 3  # the lie: 3 bytes, then cut
        assert any("a chunk longer than its size" in v for _, v in p.decisions)


@pytest.mark.parametrize("raw", [
    "GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\nX: 1\nHost: {d}\r\n\r\n",  # a bare LF inside a header line
    "GET http://{a}/ HTTP/1.1\nHost: {a}\n\n\r\n\r\n",  # LF-only line endings
    "GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\nX: 1\rHost: {d}\r\n\r\n",  # a bare CR
    "GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\nX: a\r\n Host: {d}\r\n\r\n",  # obs-fold
    "GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\nX: a\r\n\tHost: {d}\r\n\r\n",  # obs-fold with a tab
    "GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\nX: a\x00b\r\n\r\n",  # NUL in a value
    "GET http://{a}/\x00 HTTP/1.1\r\nHost: {a}\r\n\r\n",  # NUL in the target
    "GET http://{a}/ HTTP/1.1\r\nHost : {a}\r\n\r\n",  # space before the colon
    "GET  http://{a}/ HTTP/1.1\r\nHost: {a}\r\n\r\n",  # two spaces
    "GET http://{a}/ HTTP/1.9\r\nHost: {a}\r\n\r\n",  # not HTTP/1.0 or 1.1
    "G@T http://{a}/ HTTP/1.1\r\nHost: {a}\r\n\r\n",  # not a method token
    "GET http://{a}/ HTTP/1.1\r\nHo\x7fst: {a}\r\n\r\n",  # DEL in a name
])
def test_strict_request_grammar(up, raw):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a, d = f"allowed.test:{up.port}", f"denied.test:{up.port}"
        text = raw.format(a=a, d=d).encode("latin-1")
        assert status(ask(p, text)) == 400
        path_only = text.replace(f"http://{a}".encode(), b"", 1)
        connect = f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode()
        assert ask(p, connect + path_only) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        up.wait_quiet()
        assert up.everything == b""


def test_the_controls_for_the_grammar_pass(up):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a = f"allowed.test:{up.port}"
        for raw in (f"GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\nX-Tab:\tv\tw \r\nX-Empty:\r\n\r\n",
                    f"GET http://{a}/?q=%00 HTTP/1.0\r\nHost: {a}\r\n\r\n",
                    f"GET http://{a}/ HTTP/1.1\r\nHost: {a}\r\nX-Latin: caf\xe9\r\n\r\n"):
            assert status(ask(p, raw.encode("latin-1"))) == 200, raw


# --- smuggling: IP forms, ports -------------------------------------------------------------------


@pytest.mark.parametrize("form", ["127.0.0.2", "2130706434", "0177.0.0.2", "0x7f.0.0.2", "127.2", "0x7f000002",
                                  "[::ffff:127.0.0.2]", "[::ffff:7f00:2]", "[0:0:0:0:0:ffff:127.0.0.2]",
                                  "[::ffff:127.0.0.1]", "[::1]"])
def test_other_forms_of_a_denied_address_are_refused(form):
    denied = Upstream("127.0.0.2")
    try:
        with proxy([f"127.0.0.1:{denied.port}"]) as p:
            raw = f"CONNECT {form}:{denied.port} HTTP/1.1\r\nHost: {form}:{denied.port}\r\n\r\n".encode()
            assert status(ask(p, raw)) == 403
            assert status(ask(p, get(f"http://{form}:{denied.port}/", f"{form}:{denied.port}"))) == 403
            denied.wait_quiet()
            assert denied.connections == 0
    finally:
        denied.close()


@pytest.mark.parametrize("form", ["127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1"])
def test_forms_of_the_allowed_address_reach_it(up, form):
    with proxy([f"127.0.0.1:{up.port}"]) as p:
        t = f"{form}:{up.port}"
        assert b"served" in ask(p, get(f"http://{t}/", t))


def test_an_allow_entry_with_a_port_admits_that_port_only(up):
    other = Upstream()
    try:
        with proxy([f"allowed.test:{up.port}"]) as p:
            a, o = f"allowed.test:{up.port}", f"allowed.test:{other.port}"
            assert b"served" in ask(p, get(f"http://{a}/", a))
            assert status(ask(p, get(f"http://{o}/", o))) == 403
            assert status(ask(p, f"CONNECT {o} HTTP/1.1\r\nHost: {o}\r\n\r\n".encode())) == 403
            assert status(ask(p, get("http://allowed.test/", "allowed.test"))) == 403  # port 80
            other.wait_quiet()
            assert other.connections == 0
    finally:
        other.close()


def test_http_scheme_entries_refuse_opaque_and_tls_bytes(up):
    with proxy([f"http://allowed.test:{up.port}"]) as p:
        a = f"allowed.test:{up.port}"
        connect = f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode()
        assert b"served" in ask(p, connect + get("/", a))
        ask(p, connect + b"SSH-2.0-evil\r\n")
        ask(p, connect + client_hello("allowed.test"))
        up.wait_quiet()
        assert b"SSH" not in up.everything and b"\x16\x03" not in up.everything


# --- floods ---------------------------------------------------------------------------------------


def _rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_many_connections_beyond_the_cap_get_503_and_the_rest_are_served(up):
    with proxy([f"allowed.test:{up.port}"], max_connections=8, head_timeout=30) as p:
        a = f"allowed.test:{up.port}"
        holders = [socket.create_connection(address(p), timeout=5) for _ in range(8)]
        try:
            for h in holders:
                h.sendall(b"GET http://")  # a head that stays open: each holds one slot
            deadline = time.monotonic() + 5
            while p.active < 8 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert p.active == 8
            before = _rss_kb()
            extra = [ask(p, get(f"http://{a}/", a)) for _ in range(200)]
            assert all(status(r) == 503 for r in extra)
            assert _rss_kb() - before < 20_000  # turned away, not queued
        finally:
            for h in holders:
                h.close()
        deadline = time.monotonic() + 5
        while p.active and time.monotonic() < deadline:
            time.sleep(0.02)
        assert b"served" in ask(p, get(f"http://{a}/", a))


def test_a_connect_and_close_storm_leaves_the_proxy_serving(up):
    with proxy([f"allowed.test:{up.port}"], max_connections=16) as p:
        a = f"allowed.test:{up.port}"
        stop = threading.Event()

        def storm() -> None:
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    socket.create_connection(address(p), timeout=1).close()

        threads = [threading.Thread(target=storm, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            served = 0
            for _ in range(20):
                reply = ask(p, get(f"http://{a}/", a))
                served += reply.startswith(b"HTTP/1.1 200")
            assert served >= 1  # others are served while the storm runs (some may meet the cap: 503)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=5)
        assert b"served" in ask(p, get(f"http://{a}/", a))


def test_a_header_that_never_ends_gets_431_and_is_closed(up):
    with proxy([f"allowed.test:{up.port}"]) as p:
        a = f"allowed.test:{up.port}"
        with socket.create_connection(address(p), timeout=10) as c:
            c.sendall(get(f"http://{a}/", a, "X-Pad: ")[:-2])
            sent, reply = 0, b""
            try:
                while sent < 4 * HEAD_LIMIT:
                    c.sendall(b"a" * 1024)
                    sent += 1024
            except (BrokenPipeError, ConnectionResetError):
                pass
            with contextlib.suppress(ConnectionResetError):
                while data := c.recv(65536):
                    reply += data
        assert status(reply) == 431
        # the control: a head just under the cap is served
        pad = "a" * (HEAD_LIMIT - 200)
        assert b"served" in ask(p, get(f"http://{a}/", a, f"X-Pad: {pad}\r\n"))
        up.wait_quiet()
        assert up.connections == 1


def test_slowloris_is_closed_by_the_head_timeout_and_idle_tunnels_by_the_idle_timeout(up):
    with proxy([f"allowed.test:{up.port}"], head_timeout=1, idle_timeout=1.5) as p:
        a = f"allowed.test:{up.port}"
        with socket.create_connection(address(p), timeout=10) as c:
            reply = b""
            try:
                for byte in get(f"http://{a}/", a, "X-Slow: 1\r\n")[:-2]:
                    c.send(bytes([byte]))
                    time.sleep(0.2)  # one byte at a time, each inside any per-read timeout
                    if c.recv(65536, socket.MSG_DONTWAIT) if _readable(c) else b"":
                        break
            except OSError:
                pass
            with contextlib.suppress(OSError):
                while data := c.recv(65536):
                    reply += data
            assert reply == b"" or status(reply) == 408
        with socket.create_connection(address(p), timeout=10) as c:
            c.sendall(f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode())
            assert c.recv(100).startswith(b"HTTP/1.1 200")
            c.sendall(get("/", a))
            assert b"served" in c.recv(1000)  # a kept-alive tunnel, then nothing more from either side
            assert c.recv(100) == b""  # closed by the proxy (our 10 s socket timeout would raise instead)
        # the control: a slow but steady tunnel is not idle
        with socket.create_connection(address(p), timeout=10) as c:
            c.sendall(f"CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n".encode())
            assert c.recv(100).startswith(b"HTTP/1.1 200")
            for i in range(3):
                c.sendall(get(f"/{i}", a))
                assert b"served" in c.recv(1000)
                time.sleep(0.8)


def _readable(c: socket.socket) -> bool:
    import select
    return bool(select.select([c], [], [], 0)[0])


def test_a_tunnel_flooding_a_stalled_upstream_is_held_back_and_others_are_served(up):
    sink = Upstream(read=False)  # accepts and never reads
    try:
        with proxy([f"allowed.test:{up.port}", f"allowed.test:{sink.port}"]) as p:
            a, s = f"allowed.test:{up.port}", f"allowed.test:{sink.port}"
            with socket.create_connection(address(p), timeout=5) as flood:
                flood.sendall(f"CONNECT {s} HTTP/1.1\r\nHost: {s}\r\n\r\n".encode())
                assert flood.recv(100).startswith(b"HTTP/1.1 200")
                flood.setblocking(False)
                block, pushed, stalls = b"\0" * 65536, 0, 0
                while stalls < 20 and pushed < 512 * 1024 * 1024:
                    try:
                        pushed += flood.send(block)
                        stalls = 0
                    except BlockingIOError:
                        stalls += 1
                        time.sleep(0.05)
                # back-pressure reached the tool: kernel buffers plus a chunk or two in the proxy
                assert pushed < 64 * 1024 * 1024, pushed
                for _ in range(5):  # the flood is stuck, the proxy is not
                    assert b"served" in ask(p, get(f"http://{a}/", a))
    finally:
        sink.close()


def test_a_fast_bulk_tunnel_does_not_starve_other_clients(up):
    sink_sock = socket.create_server(("127.0.0.1", 0))
    sink_port = sink_sock.getsockname()[1]
    done = threading.Event()
    count = [0]

    def drain() -> None:
        conn, _ = sink_sock.accept()
        with conn:
            while data := conn.recv(1 << 20):
                count[0] += len(data)
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        with proxy([f"allowed.test:{up.port}", f"allowed.test:{sink_port}"]) as p:
            a, s = f"allowed.test:{up.port}", f"allowed.test:{sink_port}"
            bulk = socket.create_connection(address(p), timeout=5)
            bulk.sendall(f"CONNECT {s} HTTP/1.1\r\nHost: {s}\r\n\r\n".encode())
            assert bulk.recv(100).startswith(b"HTTP/1.1 200")
            stop = threading.Event()

            def push() -> None:
                block = b"\1" * (1 << 20)
                with contextlib.suppress(OSError):
                    while not stop.is_set():
                        bulk.sendall(block)
                with contextlib.suppress(OSError):
                    bulk.shutdown(socket.SHUT_WR)

            pusher = threading.Thread(target=push, daemon=True)
            pusher.start()
            try:
                deadline = time.monotonic() + 30
                while count[0] < 8 << 20:  # the bulk transfer is under way
                    assert time.monotonic() < deadline, "the bulk tunnel never flowed"
                    time.sleep(0.01)
                before = count[0]
                for _ in range(5):
                    assert b"served" in ask(p, get(f"http://{a}/", a))
                assert not stop.is_set() and count[0] > before  # served while the bulk kept flowing
            finally:
                stop.set()
                pusher.join(timeout=10)
                bulk.close()
            assert done.wait(10)
    finally:
        sink_sock.close()
