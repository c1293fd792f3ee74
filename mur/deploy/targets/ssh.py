"""An existing machine over SSH (paramiko), with the host verified and every wait bounded.

Better than upstream's `ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null` + nohup:
  * the host key is checked against known_hosts by default (`~/.ssh/known_hosts`, or
    `--known-hosts FILE`); an unknown host is refused (E-DEPLOY-009) unless `--trust-new-host`
    is given, which records the key (trust on first use) so every later connection is verified;
    a changed key is always refused;
  * key-file or agent authentication (plus the default ~/.ssh/id_* keys), no passwords;
  * connection attempts retried with exponential backoff within a budget;
  * uploads through SFTP to a temp name (0600 before the first byte), then an atomic rename;
  * a silent link is found within MUR_DEPLOY_DEAD_AFTER seconds (mur.deploy.deadlines): the socket
    counts the time since the server last sent anything, a keepalive that wants a reply is sent
    every MUR_DEPLOY_KEEPALIVE seconds, and a watchdog shuts the socket when the server stays
    silent. Every wait (a command, an SFTP write or close, a channel open) then ends at once with
    E-DEPLOY-003 naming the step in progress (`Target.doing`). A dead connection is never reused
    behind the caller's back: `reconnect()` opens a fresh one (the lock it held is gone with it).

paramiko is used here only; every paramiko (and socket) error becomes a MurError in this module
(`SSH_ERRORS`, tests/deploy/test_deploy_errors.py checks the mapping is total).

Entry points for other code (h15's `mur host prepare`): `SSHTarget(host, user=, port=, key_file=,
known_hosts=, trust_new_host=)` connects (or raises E-DEPLOY-003/009); then `run(cmd, sudo=)`,
`put_file(src, dst, mode)`, `open_port(port)`, `close()`; `tunnel_command(remote, local)`.
"""

from __future__ import annotations

import contextlib
import logging
import select
import shlex
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from mur.deploy.deadlines import Deadlines, current as current_deadlines
from mur.deploy.targets.base import Held, Result, Target
from mur.errors import MurError
from mur.paths import known_hosts_path

CONNECT_BUDGET = 30.0
# getaddrinfo's "no such name" answers (EAI_NODATA is glibc's; absent elsewhere)
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}

# paramiko logs refused channels and transport errors at WARNING through the root logger's
# last-resort handler; every failure that matters is raised as a MurError instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


def default_known_hosts() -> Path:
    return known_hosts_path()


def _ssh_errors() -> tuple[type[BaseException], ...]:
    import paramiko

    return (paramiko.SSHException, OSError, EOFError, socket.timeout)


def _close(chan) -> None:  # noqa: ANN001
    """Close a channel whatever its link's state: closing sends a message, which a dead link refuses
    (EOFError); what the channel did is already decided."""
    with contextlib.suppress(*_ssh_errors()):
        chan.close()


def _ssh_error(label: str, what: str, exc: BaseException) -> MurError:
    try:
        text = str(exc) or type(exc).__name__
    except Exception:  # noqa: BLE001 - an SDK exception whose message cannot be formatted
        text = type(exc).__name__
    return MurError("E-DEPLOY-003", f"{label}: {what} failed: {text}")


def _host_key_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class WatchedSocket(socket.socket):
    """A connected TCP socket that remembers when the peer last sent a byte (paramiko reads it)."""

    last_rx: float = 0.0

    @classmethod
    def wrap(cls, sock: socket.socket) -> "WatchedSocket":
        out = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        out.last_rx = time.monotonic()
        return out

    def recv(self, bufsize: int, *args: Any) -> bytes:  # type: ignore[override]
        data = super().recv(bufsize, *args)
        if data:
            self.last_rx = time.monotonic()
        return data


class Watchdog:
    """Keeps one transport honest: keepalives that want a reply, and a verdict when none comes.

    Two threads: a pinger (which may block in paramiko's send lock behind a stuck upload) and the
    judge (which never blocks): after `dead_after` seconds without a byte from the server it shuts
    the socket and closes the transport, which wakes every waiter on that connection."""

    def __init__(self, transport: Any, sock: WatchedSocket, dl: Deadlines, on_dead: Callable[[str], None]):
        self.tr, self.sock, self.dl, self.on_dead = transport, sock, dl, on_dead
        self.stop = threading.Event()
        self._ping = threading.Event()
        for fn in (self._judge, self._pinger):
            threading.Thread(target=fn, daemon=True, name="mur-ssh-watchdog").start()

    def _judge(self) -> None:
        tick = min(1.0, self.dl.keepalive / 2)
        last_ping = 0.0
        while not self.stop.wait(tick):
            now = time.monotonic()
            silent = now - self.sock.last_rx
            if silent >= self.dl.dead_after:
                self.on_dead(f"no answer from the host for {silent:.0f}s")
                self.kill()
                return
            if now - last_ping >= self.dl.keepalive:
                last_ping = now
                self._ping.set()

    def _pinger(self) -> None:
        from paramiko.common import cMSG_GLOBAL_REQUEST
        from paramiko.message import Message

        while not self.stop.is_set():
            self._ping.wait(1.0)
            if self.stop.is_set() or not self._ping.is_set():
                continue
            self._ping.clear()
            m = Message()
            m.add_byte(cMSG_GLOBAL_REQUEST)
            m.add_string("keepalive@openssh.com")
            m.add_boolean(True)  # want a reply: the answer is what proves the link alive
            try:
                self.tr._send_user_message(m)
            except Exception:  # noqa: BLE001 - a dead transport; the judge decides
                return

    def kill(self) -> None:
        self.stop.set()
        self._ping.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            self.tr.close()


class SSHHeld(Held):
    """A long-running remote command on its own channel (the deployment lock's holder)."""

    def __init__(self, target: "SSHTarget", chan: Any):
        self.target, self.chan = target, chan
        self._buf = b""

    def readline(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.chan.settimeout(min(left, 0.5))
            try:
                data = self.chan.recv(4096)
            except socket.timeout:
                if self.target.dead:
                    return ""
                continue
            except _ssh_errors():
                return ""
            if not data:
                line, self._buf = self._buf, b""
                return line.decode("utf-8", "replace")
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"

    def send(self, data: bytes) -> bool:
        try:
            self.chan.settimeout(2.0)
            self.chan.sendall(data)
            return True
        except _ssh_errors():
            return False

    @property
    def closed(self) -> bool:
        return self.chan.closed or self.target.dead is not None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.chan.shutdown_write()  # EOF on the holder's stdin: it exits, the lock goes with it
        with contextlib.suppress(Exception):
            self.chan.close()


class SSHTarget(Target):
    kind = "ssh"
    error_code = "E-DEPLOY-003"

    def __init__(self, host: str, *, user: str = "root", port: int = 22, key_file: str | None = None,
                 known_hosts: str | None = None, trust_new_host: bool = False,
                 connect_budget: float | None = None, note: Callable[[str], None] | None = None,
                 client_factory: Callable[[], Any] | None = None, deadlines: Deadlines | None = None):
        super().__init__()
        if not host:
            raise MurError("E-DEPLOY-001", "no host specified; create a VM first, then pass its IP via --host")
        self.host, self.ssh_user, self.port = host, user, int(port)
        self.key_file = key_file
        self.known_hosts = Path(known_hosts) if known_hosts else default_known_hosts()
        self.trust_new_host = trust_new_host
        self.deadlines = deadlines or current_deadlines()
        self.connect_budget = connect_budget or self.deadlines.connect_budget
        self._note = note or (lambda _msg: None)
        self._client_factory = client_factory
        self._client = None
        self._sftp = None
        self._watchdog: Watchdog | None = None
        self.dead: str | None = None  # why the current connection is known dead (None: alive)
        self._aborted: str | None = None  # abort() was called: no new connection either
        self._connect()

    @property
    def label(self) -> str:
        return f"{self.ssh_user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")

    def tunnel_command(self, remote_port: int, local_port: int) -> str:
        """The ssh command a user runs to reach a loopback-bound service, exactly as it must be typed:
        the key and known_hosts deploy used (so the host key is verified the same way)."""
        q = shlex.quote
        parts = ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-L", f"{local_port}:127.0.0.1:{remote_port}"]
        if self.port != 22:
            parts += ["-p", str(self.port)]
        if self.key_file:
            parts += ["-i", q(self.key_file)]
        if self.known_hosts != default_known_hosts():
            parts += ["-o", q(f"UserKnownHostsFile={self.known_hosts}")]
        return " ".join(parts + [q(f"{self.ssh_user}@{self.host}")])

    # connection -------------------------------------------------------------------------------

    def _policy(self):
        import paramiko

        target = self

        class _RecordNew(paramiko.MissingHostKeyPolicy):
            """Trust on first use, only when asked: record the key so later connections verify it."""

            def missing_host_key(self, client, hostname, key):  # noqa: ANN001
                client.get_host_keys().add(hostname, key.get_name(), key)
                target.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                client.save_host_keys(str(target.known_hosts))
                fp = key.fingerprint
                target._note(f"trusting new host key for {hostname}: {key.get_name()} {fp} "
                             f"(recorded in {target.known_hosts})")

        if self.trust_new_host:
            return _RecordNew()
        return paramiko.RejectPolicy()

    def _connect(self, budget: float | None = None) -> None:
        import paramiko

        dl = self.deadlines
        budget = self.connect_budget if budget is None else budget
        delay, deadline = 1.0, time.monotonic() + budget
        last: Exception | None = None
        while True:
            client = (self._client_factory or paramiko.SSHClient)()
            try:
                if self.known_hosts.exists():
                    client.load_host_keys(str(self.known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise MurError("E-DEPLOY-009", f"cannot read known_hosts {self.known_hosts}: {exc}") from exc
            client.set_missing_host_key_policy(self._policy())
            sock: WatchedSocket | None = None
            try:
                attempt = max(1.0, min(dl.connect, deadline - time.monotonic()))
                if self._client_factory is None:  # a test's client brings its own transport
                    sock = WatchedSocket.wrap(socket.create_connection((self.host, self.port), timeout=attempt))
                client.connect(self.host, port=self.port, username=self.ssh_user, key_filename=self.key_file,
                               look_for_keys=self.key_file is None, allow_agent=True, timeout=attempt,
                               banner_timeout=attempt, auth_timeout=attempt, channel_timeout=attempt, sock=sock)
                self._client, self.dead = client, None
                if sock is not None:
                    self._watchdog = Watchdog(client.get_transport(), sock, dl, self._died)
                return
            except paramiko.BadHostKeyException as exc:
                client.close()
                raise MurError(
                    "E-DEPLOY-009",
                    f"host key for {_host_key_name(self.host, self.port)} does not match {self.known_hosts} "
                    f"(got {exc.key.get_name()}): refusing to connect",
                    "if the host was really reinstalled, remove its old line from known_hosts "
                    f"(ssh-keygen -R '{_host_key_name(self.host, self.port)}' -f {self.known_hosts}) and verify the new key",
                ) from exc
            except paramiko.AuthenticationException as exc:
                client.close()
                raise MurError("E-DEPLOY-003", f"SSH authentication failed for {self.label}: {exc}",
                               "pass --ssh-key PATH or load the key into ssh-agent") from exc
            except paramiko.SSHException as exc:
                client.close()
                if "not found in known_hosts" in str(exc):
                    raise MurError(
                        "E-DEPLOY-009",
                        f"host {_host_key_name(self.host, self.port)} is not in {self.known_hosts}",
                        "verify the host key and add it (ssh-keyscan), or pass --trust-new-host to record it on "
                        "first use",
                    ) from exc
                last = exc
            except socket.gaierror as exc:
                client.close()
                if exc.errno in _NO_SUCH_NAME:  # the resolver's final answer: waiting changes nothing
                    raise MurError("E-DEPLOY-003", f"{self.host} does not resolve: {exc.strerror}",
                                   "check the host name (or give its IP address)") from exc
                last = exc  # EAI_AGAIN and the like: the resolver may answer later
            except (OSError, EOFError) as exc:  # socket.timeout is an OSError
                client.close()
                last = exc
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
            if time.monotonic() + delay > deadline:
                raise MurError("E-DEPLOY-003", f"SSH not available on {self.label} after {budget:.0f}s: {last}",
                               "check the host, port and firewall; is sshd running?") from last
            time.sleep(delay)
            delay = min(delay * 2, 8.0)

    def _died(self, why: str) -> None:
        self.dead = why

    def abort(self, why: str = "stopped: the command ran out of time") -> None:
        """End every wait on this connection now (from another thread), and refuse new ones."""
        self._aborted = why
        self.dead = self.dead or why
        if self._watchdog is not None:
            self._watchdog.kill()

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.stop.set()
            self._watchdog = None
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.get_channel().close()  # never SFTPClient.close(): it waits on a dead link
            self._sftp = None
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    def reconnect(self, budget: float | None = None) -> None:
        """Drop this connection (and whatever it held on the target) and open a fresh one."""
        self.close()
        if self._aborted:
            raise MurError("E-DEPLOY-003", f"{self.label}: {self._aborted}")
        self.dead = None
        self._connect(budget)
        if self._aborted:  # aborted while connecting
            self.abort(self._aborted)
            raise MurError("E-DEPLOY-003", f"{self.label}: {self._aborted}")

    def alive(self, timeout: float = 3.0) -> bool:
        """Whether the connection still carries a command right now (paramiko may call a dead one active)."""
        if self.dead is not None or self._client is None:
            return False
        try:
            return self._exec("true", timeout, None, open_timeout=timeout).rc == 0
        except MurError:
            return False

    def _lost(self, what: str, exc: BaseException | None = None) -> MurError:
        during = f" during {self.doing}" if self.doing else ""
        text = ""
        if exc is not None:
            try:
                text = str(exc)
            except Exception:  # noqa: BLE001
                text = ""
        # paramiko's "Timeout opening channel.": the host let a channel open go unanswered for the
        # connect deadline, which can come before the watchdog's DEAD_AFTER: the same silence
        silent = self.dead or ("no answer to a channel open within the connect deadline"
                               if "Timeout opening channel" in text else None)
        if silent is not None:
            return MurError("E-DEPLOY-003", f"{self.label}: the link went silent{during} ({what}): {silent}",
                            f"the link is checked every {self.deadlines.keepalive:g}s and called dead after "
                            f"{self.deadlines.dead_after:g}s of silence (docs/deploy.md, Deadlines)")
        return MurError("E-DEPLOY-003", f"{self.label}: {what} failed{during}: "
                        f"{text or 'the connection was closed (by the host or the network)'}",
                        "`mur deploy status ID` shows what is true on the target; the next deploy repairs what a "
                        "cut command left")

    def _alive_transport(self) -> bool:
        tr = self._client.get_transport() if self._client else None
        return tr is not None and tr.is_active()

    def _transport(self):
        tr = self._client.get_transport() if self._client else None
        if self.dead is not None or tr is None or not tr.is_active():
            raise self._lost("SSH connection")
        return tr

    # primitives -------------------------------------------------------------------------------

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None, open_timeout: float | None = None) -> Result:
        limit = timeout if timeout is not None else self.deadlines.command
        try:
            chan = self._transport().open_session(timeout=open_timeout or self.deadlines.connect)
            try:
                chan.settimeout(self.deadlines.dead_after)
                chan.exec_command(cmd)
                if stdin:
                    chan.sendall(stdin)
                chan.shutdown_write()
                out, err = bytearray(), bytearray()
                deadline = time.monotonic() + limit
                while True:
                    if chan.recv_ready():
                        out += chan.recv(65536)
                        continue
                    if chan.recv_stderr_ready():
                        err += chan.recv_stderr(65536)
                        continue
                    # sshd may send the exit status before the last output (RFC 4254 6.10): done only
                    # once the output ended too (EOF), or the channel closed
                    if chan.exit_status_ready() and (chan.eof_received or chan.closed) \
                            and not chan.recv_ready() and not chan.recv_stderr_ready():
                        break
                    if (chan.closed and not chan.exit_status_ready()) or self.dead is not None:
                        raise self._lost("SSH command")
                    if time.monotonic() > deadline:
                        during = f" during {self.doing}" if self.doing else ""
                        raise MurError("E-DEPLOY-003", f"{self.label}: command timed out after {limit:g}s{during}: "
                                       f"{cmd[:200]}")
                    select.select([chan], [], [], 0.2)
                rc = chan.recv_exit_status()
                if rc == -1 and (self.dead is not None or not self._alive_transport()):
                    # paramiko reports a channel that died with its connection as exit status -1
                    raise self._lost("SSH command")
                return Result(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
            finally:
                _close(chan)
        except MurError:
            raise
        except _ssh_errors() as exc:
            raise self._lost("SSH command", exc) from exc

    def _sftp_client(self):
        if self._sftp is None:
            import paramiko

            chan = self._transport().open_session(timeout=self.deadlines.connect)
            chan.settimeout(self.deadlines.upload_stall)  # every SFTP read and write: progress or fail
            chan.invoke_subsystem("sftp")
            self._sftp = paramiko.SFTPClient(chan)
        return self._sftp

    def sftp(self):  # noqa: ANN201 - paramiko.SFTPClient
        """The connection's SFTP client (mur.remote reads session traces through it, read-only)."""
        try:
            return self._sftp_client()
        except _ssh_errors() as exc:
            raise _ssh_error(self.label, "SFTP", exc) from exc

    def _put(self, src: Path | bytes, dst: str) -> None:
        fh = None
        try:
            sftp = self._sftp_client()
            fh = sftp.open(dst, "wb")
            fh.chmod(0o600)  # content may be secret (env file, token, key): private before written
            fh.set_pipelined(True)
            if isinstance(src, bytes):
                fh.write(src)
            else:
                with open(src, "rb") as inp:
                    for chunk in iter(lambda: inp.read(1 << 20), b""):
                        fh.write(chunk)
                        if self.dead is not None:
                            raise self._lost(f"SFTP upload to {dst}")
            # close() waits for every pipelined write's answer: bounded by the channel's timeout and
            # woken by the watchdog. Only on success: after a failure or Ctrl-C the channel is
            # dropped below instead (a close would wait for answers that may never come).
            fh.close()
        except BaseException as exc:
            if fh is not None:
                fh._closed = True  # its finaliser would wait for the pipelined answers: there are none to wait for
            sftp, self._sftp = self._sftp, None  # a failed or interrupted transfer: never reuse the channel
            if sftp is not None:
                with contextlib.suppress(Exception):
                    sftp.get_channel().close()
            if isinstance(exc, MurError):
                raise
            if isinstance(exc, _ssh_errors()):
                raise self._lost(f"SFTP upload to {dst}", exc) from exc
            raise

    def hold(self, cmd: str) -> Held:
        try:
            chan = self._transport().open_session(timeout=self.deadlines.connect)
            chan.exec_command(cmd)
        except MurError:
            raise
        except _ssh_errors() as exc:
            raise self._lost("SSH command", exc) from exc
        return SSHHeld(self, chan)

    def stream(self, cmd: str, sink: Callable[[bytes], None]) -> int:
        try:
            chan = self._transport().open_session(timeout=self.deadlines.connect)
            try:
                chan.set_combine_stderr(True)
                chan.exec_command(cmd)
                chan.settimeout(1.0)
                while True:
                    try:
                        data = chan.recv(65536)
                    except socket.timeout:
                        if self.dead is not None:
                            raise self._lost("SSH command") from None
                        continue
                    if not data:
                        break
                    sink(data)
                return chan.recv_exit_status()
            finally:
                _close(chan)
        except MurError:
            raise
        except _ssh_errors() as exc:
            raise self._lost("SSH command", exc) from exc

    # port forwarding --------------------------------------------------------------------------

    @contextlib.contextmanager
    def open_port(self, port: int) -> Iterator[tuple[str, int]]:
        """127.0.0.1:<local> here, tunnelled to 127.0.0.1:<port> on the target (no port opened there)."""
        with self.forward(port) as fw:
            yield "127.0.0.1", fw.port

    def forward(self, remote_port: int, local_port: int = 0) -> "Forward":
        """Forward 127.0.0.1:<local> here to 127.0.0.1:<remote_port> on the target (like ssh -L)."""
        return Forward(self, remote_port, local_port)


class Forward:
    """A local listening socket whose connections are tunnelled through the SSH transport."""

    def __init__(self, target: SSHTarget, remote_port: int, local_port: int = 0):
        self.target, self.remote_port = target, remote_port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", local_port))
            self.sock.listen(16)
        except OSError as exc:
            self.sock.close()
            raise MurError("E-DEPLOY-003", f"cannot listen on 127.0.0.1:{local_port} for a tunnel: {exc.strerror or exc}") from exc
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(conn, peer), daemon=True).start()

    def _pipe(self, conn: socket.socket, peer) -> None:  # noqa: ANN001
        try:
            chan = self.target._transport().open_channel("direct-tcpip", ("127.0.0.1", self.remote_port), peer,
                                                         timeout=self.target.deadlines.connect)
        except (MurError, *_ssh_errors()):  # the remote refused or the link is gone: drop this client
            conn.close()
            return
        try:
            while True:
                r, _, _ = select.select([conn, chan], [], [], 1.0)
                if conn in r:
                    data = conn.recv(65536)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in r:
                    data = chan.recv(65536)
                    if not data:
                        break
                    conn.sendall(data)
        except _ssh_errors():  # either side went away: end this client connection
            pass
        finally:  # on its own thread: a dead link's EOFError from close must not surface as a traceback
            _close(chan)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()

    def __enter__(self) -> "Forward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
