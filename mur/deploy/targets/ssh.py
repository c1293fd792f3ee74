"""An existing machine over SSH (paramiko), with the host verified.

Better than upstream's `ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null`:
  * the host key is checked against known_hosts by default (`~/.ssh/known_hosts`, or
    `--known-hosts FILE`); an unknown host is refused (E-DEPLOY-009) unless `--trust-new-host`
    is given, which records the key (trust on first use) so every later connection is verified;
    a changed key is always refused;
  * key-file or agent authentication (plus the default ~/.ssh/id_* keys), no passwords;
  * connection attempts retried with exponential backoff (1 s doubling, 30 s budget);
  * uploads through SFTP to a temp name (0600 before the first byte), then an atomic rename.

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

from mur.deploy.targets.base import Result, Target
from mur.errors import MurError
from mur.paths import known_hosts_path

CONNECT_BUDGET = 30.0

# paramiko logs refused channels and transport errors at WARNING through the root logger's
# last-resort handler; every failure that matters is raised as a MurError instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


def default_known_hosts() -> Path:
    return known_hosts_path()


def _ssh_errors() -> tuple[type[BaseException], ...]:
    import paramiko

    return (paramiko.SSHException, OSError, EOFError, socket.timeout)


def _ssh_error(label: str, what: str, exc: BaseException) -> MurError:
    try:
        text = str(exc) or type(exc).__name__
    except Exception:  # noqa: BLE001 - an SDK exception whose message cannot be formatted
        text = type(exc).__name__
    return MurError("E-DEPLOY-003", f"{label}: {what} failed: {text}")


def _host_key_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class SSHTarget(Target):
    kind = "ssh"
    error_code = "E-DEPLOY-003"

    def __init__(self, host: str, *, user: str = "root", port: int = 22, key_file: str | None = None,
                 known_hosts: str | None = None, trust_new_host: bool = False,
                 connect_budget: float = CONNECT_BUDGET, note: Callable[[str], None] | None = None,
                 client_factory: Callable[[], Any] | None = None):
        super().__init__()
        if not host:
            raise MurError("E-DEPLOY-001", "no host specified; create a VM first, then pass its IP via --host")
        self.host, self.ssh_user, self.port = host, user, int(port)
        self.key_file = key_file
        self.known_hosts = Path(known_hosts) if known_hosts else default_known_hosts()
        self.trust_new_host = trust_new_host
        self.connect_budget = connect_budget
        self._note = note or (lambda _msg: None)
        self._client_factory = client_factory
        self._client = None
        self._sftp = None
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

    def _connect(self) -> None:
        import paramiko

        delay, deadline = 1.0, time.monotonic() + self.connect_budget
        last: Exception | None = None
        while True:
            client = (self._client_factory or paramiko.SSHClient)()
            try:
                if self.known_hosts.exists():
                    client.load_host_keys(str(self.known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise MurError("E-DEPLOY-009", f"cannot read known_hosts {self.known_hosts}: {exc}") from exc
            client.set_missing_host_key_policy(self._policy())
            try:
                client.connect(self.host, port=self.port, username=self.ssh_user, key_filename=self.key_file,
                               look_for_keys=self.key_file is None, allow_agent=True, timeout=10,
                               banner_timeout=15, auth_timeout=15)
                self._client = client
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
            except (OSError, EOFError) as exc:  # socket.timeout is an OSError
                client.close()
                last = exc
            if time.monotonic() + delay > deadline:
                raise MurError("E-DEPLOY-003", f"SSH not available on {self.label} after {self.connect_budget:.0f}s: {last}",
                               "check the host, port and firewall; is sshd running?") from last
            time.sleep(delay)
            delay = min(delay * 2, 8.0)

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # noqa: BLE001 - closing a dead channel
                pass
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _transport(self):
        tr = self._client.get_transport() if self._client else None
        if tr is None or not tr.is_active():
            self.close()
            self._connect()
            tr = self._client.get_transport()
        if tr is None:
            raise MurError("E-DEPLOY-003", f"{self.label}: the SSH connection is gone")
        return tr

    # primitives -------------------------------------------------------------------------------

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None) -> Result:
        try:
            chan = self._transport().open_session()
            chan.exec_command(cmd)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout if timeout else None
            while True:
                if chan.recv_ready():
                    out += chan.recv(65536)
                    continue
                if chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    continue
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if deadline and time.monotonic() > deadline:
                    chan.close()
                    raise MurError("E-DEPLOY-003", f"{self.label}: command timed out after {timeout}s: {cmd[:200]}")
                select.select([chan], [], [], 0.2)
            rc = chan.recv_exit_status()
            chan.close()
            return Result(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        except _ssh_errors() as exc:
            raise _ssh_error(self.label, "SSH command", exc) from exc

    def _sftp_client(self):
        if self._sftp is None:
            self._transport()
            self._sftp = self._client.open_sftp()
        return self._sftp

    def sftp(self):  # noqa: ANN201 - paramiko.SFTPClient
        """The connection's SFTP client (mur.remote reads session traces through it, read-only)."""
        try:
            return self._sftp_client()
        except _ssh_errors() as exc:
            raise _ssh_error(self.label, "SFTP", exc) from exc

    def _put(self, src: Path | bytes, dst: str) -> None:
        try:
            sftp = self._sftp_client()
            with sftp.open(dst, "wb") as fh:
                fh.chmod(0o600)  # content may be secret (env file, token, key): private before written
                fh.set_pipelined(True)
                if isinstance(src, bytes):
                    fh.write(src)
                else:
                    with open(src, "rb") as inp:
                        for chunk in iter(lambda: inp.read(1 << 20), b""):
                            fh.write(chunk)
        except _ssh_errors() as exc:
            self._sftp = None
            raise _ssh_error(self.label, f"SFTP upload to {dst}", exc) from exc

    def stream(self, cmd: str, sink: Callable[[bytes], None]) -> int:
        try:
            chan = self._transport().open_session()
            try:
                chan.set_combine_stderr(True)
                chan.exec_command(cmd)
                while True:
                    data = chan.recv(65536)
                    if not data:
                        break
                    sink(data)
                return chan.recv_exit_status()
            finally:
                chan.close()
        except _ssh_errors() as exc:
            raise _ssh_error(self.label, "SSH command", exc) from exc

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
            chan = self.target._transport().open_channel("direct-tcpip", ("127.0.0.1", self.remote_port), peer)
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
        finally:
            chan.close()
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()

    def __enter__(self) -> "Forward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
