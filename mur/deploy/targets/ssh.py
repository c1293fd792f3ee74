"""An existing machine over SSH (paramiko), with the host verified.

Better than upstream's `ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null`:
  * the host key is checked against known_hosts by default (`~/.ssh/known_hosts`, or
    `--known-hosts FILE`); an unknown host is refused (E-DEPLOY-009) unless `--trust-new-host`
    is given, which records the key (trust on first use) so every later connection is verified;
    a changed key is always refused;
  * key-file or agent authentication (plus the default ~/.ssh/id_* keys), no passwords;
  * connection attempts retried with exponential backoff (1 s doubling, 30 s budget);
  * uploads through SFTP to a temp name, then an atomic rename.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from pathlib import Path
from typing import Callable

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


def _host_key_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class SSHTarget(Target):
    kind = "ssh"
    error_code = "E-DEPLOY-003"

    def __init__(self, host: str, *, user: str = "root", port: int = 22, key_file: str | None = None,
                 known_hosts: str | None = None, trust_new_host: bool = False,
                 connect_budget: float = CONNECT_BUDGET, note: Callable[[str], None] | None = None):
        super().__init__()
        if not host:
            raise MurError("E-DEPLOY-001", "no host specified; create a VM first, then pass its IP via --host")
        self.host, self.ssh_user, self.port = host, user, int(port)
        self.key_file = key_file
        self.known_hosts = Path(known_hosts) if known_hosts else default_known_hosts()
        self.trust_new_host = trust_new_host
        self.connect_budget = connect_budget
        self._note = note or (lambda _msg: None)
        self._client = None
        self._sftp = None
        self._connect()

    @property
    def label(self) -> str:
        return f"{self.ssh_user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")

    def tunnel_command(self, remote_port: int, local_port: int | None = None) -> str:
        """The ssh command a user runs to reach a loopback-bound service."""
        key = f" -i {self.key_file}" if self.key_file else ""
        port = f" -p {self.port}" if self.port != 22 else ""
        return f"ssh -N -L {local_port or remote_port}:127.0.0.1:{remote_port}{port}{key} {self.ssh_user}@{self.host}"

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
            client = paramiko.SSHClient()
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
            except (OSError, EOFError) as exc:
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
        return tr

    # primitives -------------------------------------------------------------------------------

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None) -> Result:
        import paramiko

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
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise MurError("E-DEPLOY-003", f"{self.label}: SSH command failed: {exc}") from exc

    def _sftp_client(self):
        if self._sftp is None:
            self._sftp = self._client.open_sftp()
        return self._sftp

    def _put(self, src: Path | bytes, dst: str) -> None:
        import paramiko

        try:
            sftp = self._sftp_client()
            if isinstance(src, bytes):
                with sftp.open(dst, "wb") as fh:
                    fh.chmod(0o600)  # content may be secret (the env file): private before written
                    fh.set_pipelined(True)
                    fh.write(src)
            else:
                sftp.put(str(src), dst, confirm=True)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise MurError("E-DEPLOY-003", f"SFTP upload to {self.label}:{dst} failed: {exc}") from exc

    def _get(self, path: str) -> bytes:
        import paramiko

        try:
            with self._sftp_client().open(path, "rb") as fh:
                return fh.read()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise MurError("E-DEPLOY-003", f"cannot read {self.label}:{path}: {exc}") from exc

    def stream(self, cmd: str, sink: Callable[[bytes], None]) -> int:
        chan = self._transport().open_session()
        chan.set_combine_stderr(True)
        chan.exec_command(cmd)
        try:
            while True:
                data = chan.recv(65536)
                if not data:
                    break
                sink(data)
            return chan.recv_exit_status()
        finally:
            chan.close()

    # port forwarding --------------------------------------------------------------------------

    def http_get(self, port: int, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        """One HTTP/1.0 GET to 127.0.0.1:<port> on the target, through an SSH direct-tcpip channel."""
        import paramiko

        try:
            chan = self._transport().open_channel("direct-tcpip", ("127.0.0.1", port), ("127.0.0.1", 0),
                                                  timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionError(str(exc)) from exc
        try:
            chan.settimeout(timeout)
            chan.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            data = bytearray()
            while True:
                chunk = chan.recv(65536)
                if not chunk:
                    break
                data += chunk
        except (OSError, paramiko.SSHException) as exc:
            raise ConnectionError(str(exc)) from exc
        finally:
            chan.close()
        head, _, body = bytes(data).partition(b"\r\n\r\n")
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError) as exc:
            raise ConnectionError(f"not an HTTP answer: {head[:80]!r}") from exc
        return status, body

    def agent_card(self, port: int, wait: float, runtime: str) -> dict:
        """Through the SSH connection itself: no runtime start on the target, no open port."""
        import json

        deadline = time.monotonic() + wait
        last = ""
        while True:
            try:
                status, body = self.http_get(port, "/.well-known/agent-card.json")
                if status == 200:
                    return {"ok": True, "agent_card": json.loads(body)}
                last = f"HTTP {status}"
            except (ConnectionError, ValueError) as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                return {"ok": False, "error": f"no agent card on 127.0.0.1:{port}: {last}"}
            time.sleep(0.5)

    def forward(self, remote_port: int, local_port: int = 0) -> "Forward":
        """Forward 127.0.0.1:<local> here to 127.0.0.1:<remote_port> on the target (like ssh -L)."""
        return Forward(self, remote_port, local_port)


class Forward:
    """A local listening socket whose connections are tunnelled through the SSH transport."""

    def __init__(self, target: SSHTarget, remote_port: int, local_port: int = 0):
        self.target, self.remote_port = target, remote_port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", local_port))
        self.sock.listen(16)
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
        except Exception:  # noqa: BLE001 - the remote refused: drop this client connection
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
        except OSError:
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
