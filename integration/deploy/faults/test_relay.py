"""The fault relay itself (mur.testing.relay), against loopback servers: what a fault scenario relies
on must hold exactly (a cut after N bytes delivers N bytes, a refused port refuses, a blackhole
forwards nothing and resumes). Fast, no containers."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from mur.testing.relay import DOWN, UP, Relay


class Server:
    """A loopback server: records what each connection sent, answers with `reply` (or echoes)."""

    def __init__(self, reply: bytes | None = None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.received: list[bytearray] = []
        self.ended: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            got = bytearray()
            self.received.append(got)
            threading.Thread(target=self._serve, args=(conn, got), daemon=True).start()

    def _serve(self, conn: socket.socket, got: bytearray) -> None:
        how = "eof"
        try:
            if self.reply is not None:
                conn.sendall(self.reply)
            while data := conn.recv(65536):
                got.extend(data)
                if self.reply is None:
                    conn.sendall(data)
            if self.reply is None:
                conn.shutdown(socket.SHUT_WR)
        except OSError as exc:
            how = type(exc).__name__
        self.ended.append(how)
        conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echo():
    server = Server()
    yield server
    server.close()


def connect(relay: Relay, timeout: float = 5) -> socket.socket:
    return socket.create_connection(("127.0.0.1", relay.port), timeout=timeout)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def recv_until_closed(sock: socket.socket, timeout: float = 5) -> tuple[bytes, str]:
    sock.settimeout(timeout)
    out = bytearray()
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        return bytes(out), "reset"
    except socket.timeout:
        return bytes(out), "timeout"
    return bytes(out), "eof"


def wait(predicate, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_pass_through_is_byte_exact_both_ways_and_passes_eof(echo):
    payload = bytes(range(256)) * 8192  # 2 MiB: more than the relay buffers at once
    with Relay(echo.port) as relay, connect(relay) as c:
        sender = threading.Thread(target=c.sendall, args=(payload,))
        sender.start()
        got = recv_exact(c, len(payload))
        sender.join()
        assert got == payload
        c.shutdown(socket.SHUT_WR)
        assert recv_until_closed(c) == (b"", "eof")
        assert relay.bytes[UP] == relay.bytes[DOWN] == len(payload)
        assert wait(lambda: relay.open_connections == 0)


@pytest.mark.parametrize("direction", [UP, DOWN])
def test_a_cut_after_n_bytes_delivers_exactly_n_then_ends_the_connection(direction):
    big = b"x" * 300_000
    server = Server(reply=big if direction == DOWN else b"")
    try:
        with Relay(server.port) as relay:
            trig = relay.arm(123_457, direction, "cut")
            c = connect(relay)
            if direction == UP:
                try:
                    c.sendall(big)
                except OSError:
                    pass
                assert trig.fired.wait(5)
                assert wait(lambda: len(server.ended) == 1)
                assert len(server.received[0]) == 123_457 and server.ended == ["eof"]
                assert recv_until_closed(c)[1] in ("reset", "eof")
            else:
                data, how = recv_until_closed(c)
                assert len(data) == 123_457 and how == "eof"
            assert relay.open_connections == 0
            # the link was cut, not taken away: the next connection passes
            with connect(relay) as again:
                again.sendall(b"ping")
                again.shutdown(socket.SHUT_WR)
                assert wait(lambda: len(server.received) == 2 and bytes(server.received[1]) == b"ping")
            c.close()
    finally:
        server.close()


def test_refuse_closes_the_port_for_new_connections_only(echo):
    with Relay(echo.port) as relay, connect(relay) as old:
        relay.refuse()
        with pytest.raises(ConnectionRefusedError):
            connect(relay)
        old.sendall(b"still here")
        assert recv_exact(old, 10) == b"still here"
        relay.pass_through()
        with connect(relay) as new:
            new.sendall(b"back")
            assert recv_exact(new, 4) == b"back"


def test_blackhole_holds_everything_silent_and_pass_through_resumes_it(echo):
    with Relay(echo.port) as relay, connect(relay) as old:
        old.sendall(b"a")
        assert recv_exact(old, 1) == b"a"
        relay.blackhole()
        old.sendall(b"lost?")
        held = connect(relay)  # accepted (the client cannot tell), never connected onwards
        held.sendall(b"held")
        old.settimeout(0.5)
        held.settimeout(0.5)
        with pytest.raises(socket.timeout):
            old.recv(10)
        with pytest.raises(socket.timeout):
            held.recv(10)
        assert len(echo.received) == 1 and bytes(echo.received[0]) == b"a"
        # a sender that keeps writing into the blackhole is stopped by full buffers, as behind a dead route
        old.setblocking(False)
        pushed = 0
        try:
            while pushed < 64 << 20:
                pushed += old.send(b"z" * 65536)
        except BlockingIOError:
            pass
        assert pushed < 64 << 20
        relay.pass_through()
        old.settimeout(5)
        held.settimeout(5)
        assert recv_exact(held, 4) == b"held"
        assert recv_exact(old, 5) == b"lost?"
        held.close()


def test_cut_on_command_resets_every_connection_and_upstream_down_resets_the_client(echo):
    with Relay(echo.port) as relay:
        a, b = connect(relay), connect(relay)
        a.sendall(b"1")
        b.sendall(b"2")
        assert recv_exact(a, 1) == b"1" and recv_exact(b, 1) == b"2"
        relay.cut(rst=True)
        assert recv_until_closed(a)[1] == "reset" and recv_until_closed(b)[1] == "reset"
        a.close()
        b.close()
    # bound and never listening: a connection is refused, and (unlike a closed socket's port) no other
    # test's service can take the port meanwhile
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        with Relay(dead.getsockname()[1]) as relay:
            try:
                c = connect(relay)
            except ConnectionResetError:  # the relay's reset came before connect() read its result
                return
            with c:
                assert recv_until_closed(c)[1] in ("reset", "eof")


def test_triggers_run_callables_and_chain_actions(echo):
    seen = []
    with Relay(echo.port) as relay, connect(relay) as c:
        first = relay.arm(3, UP, lambda r: seen.append((r.bytes[UP], r.bytes[DOWN])))
        second = relay.arm(6, DOWN, ["blackhole"])
        c.sendall(b"abcdefgh")
        assert first.fired.wait(5) and second.fired.wait(5)
        assert seen == [(3, 0)]
        assert relay.silent and relay.bytes[DOWN] == 6
        c.settimeout(5)
        assert recv_exact(c, 6) == b"abcdef"
        relay.pass_through()
        assert recv_exact(c, 2) == b"gh"
        assert "blackhole" in relay.describe()
