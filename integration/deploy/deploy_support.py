"""Helpers for the deploy integration tests: real sshd containers, the real CLI, real A2A calls."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BASE_IMAGE = "mur-base:bookworm"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mur(*args: str, home: Path, timeout: float = 900, env: dict | None = None, check: bool = True,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI (this checkout's package) with HOME pointing at a clean directory."""
    full = dict(os.environ)
    full["HOME"] = str(home)
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, timeout=timeout,
                          env=full, cwd=str(cwd or ROOT))
    if check and proc.returncode != 0:
        raise AssertionError(f"mur {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}")
    return proc


def mur_json(*args: str, home: Path, **kw) -> dict:
    proc = mur(*args, "--json", home=home, **kw)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def keygen(path: Path, comment: str = "mur-test") -> Path:
    """An ed25519 key pair (ssh-keygen), returns the private key path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


def _tar(files: dict[str, tuple[bytes, int, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (data, mode, uid) in files.items():
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode, info.uid, info.gid, info.mtime = len(data), mode, uid, uid, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sshd_image(client) -> str:  # noqa: ANN001 - docker client
    """Build the sshd "VM" image once per Dockerfile content (cached in the engine)."""
    digest = hashlib.sha256((FIXTURES / "sshd.Dockerfile").read_bytes() + (FIXTURES / "sshd-vm-init").read_bytes())
    tag = f"mur-sshd-test:{digest.hexdigest()[:12]}"
    try:
        client.images.get(tag)
        return tag
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
        pass
    proc = subprocess.run(["docker", "build", "--network", "host", "-q", "-f", str(FIXTURES / "sshd.Dockerfile"),
                           "--build-arg", f"BASE={BASE_IMAGE}", "-t", tag, str(FIXTURES)],
                          capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if proc.returncode != 0:
        raise RuntimeError(f"building {tag} failed:\n{proc.stderr[-3000:]}")
    return tag


@dataclass
class SshdVM:
    """A running sshd container standing in for an existing VM (host network, loopback only)."""

    container: object
    port: int
    key: Path
    host_pub: str
    workdir: Path

    def known_hosts(self, path: Path | None = None) -> Path:
        path = path or self.workdir / "known_hosts"
        kind, b64 = self.host_pub.split()[:2]
        path.write_text(f"[127.0.0.1]:{self.port} {kind} {b64}\n")
        return path

    def sh(self, cmd: str) -> tuple[int, str]:
        res = self.container.exec_run(["/bin/sh", "-c", cmd], demux=False)
        return res.exit_code, (res.output or b"").decode("utf-8", "replace")

    def procs(self) -> list[str]:
        """Command lines of every process in the container except sshd and this probe."""
        _, out = self.sh("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
                         "[ -n \"$c\" ] && echo \"$c\"; done")
        return [ln for ln in out.splitlines() if "sshd" not in ln and "/proc/[0-9]" not in ln and ln.strip()
                and not ln.startswith("/bin/sh -c for p in")]

    def close(self) -> None:
        try:
            self.container.remove(force=True)
        except Exception:  # noqa: BLE001
            pass
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_sshd(client, image: str, workdir: Path) -> SshdVM:  # noqa: ANN001
    """Start one sshd "VM" with a fresh host key and one client key for root and deployer."""
    workdir.mkdir(parents=True, exist_ok=True)
    key = keygen(workdir / "id_ed25519")
    host = keygen(workdir / "host_ed25519", "sshd-vm")
    pub = (workdir / "id_ed25519.pub").read_bytes()
    port = free_port()
    c = client.containers.create(
        image, command=[str(port)], network_mode="host", cgroupns="private", cap_add=["SYS_ADMIN"], init=True,
        labels={"dev.mur.test": "sshd-vm"}, detach=True)
    c.put_archive("/", _tar({
        "etc/ssh/test_host_ed25519_key": (host.read_bytes(), 0o600, 0),
        "root/.ssh/authorized_keys": (pub, 0o600, 0),
        "home/deployer/.ssh/authorized_keys": (pub, 0o600, 1000),
    }))
    c.start()
    vm = SshdVM(c, port, key, (workdir / "host_ed25519.pub").read_text(), workdir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                if s.recv(16).startswith(b"SSH-"):
                    return vm
        except OSError:
            time.sleep(0.2)
    c.reload()
    logs = c.logs().decode(errors="replace")
    vm.close()
    raise RuntimeError(f"sshd did not come up on port {port}: {logs[-2000:]}")


def a2a_send(url: str, text: str, timeout: float = 300) -> str:
    """Send one task with the real A2A client; returns the answer text."""
    from mur.a2a.client import send_task, task_text

    task = send_task(url, text, timeout=timeout)
    state = task.get("status", {}).get("state")
    assert state == "completed", f"task ended {state}: {task}"
    return task_text(task).strip()


def shell_task(*commands: str) -> str:
    """A capsule_probe task that runs each command through the `sh` shell tool (one call each)."""
    return json.dumps({"op": "invoke", "calls": [{"tool": "sh", "data": json.dumps({"command": c})} for c in commands]})


FORK_40 = "i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo started"
READ_OUTSIDE = "read x < /etc/hostname && echo read-ok"
