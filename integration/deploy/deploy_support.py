"""Helpers for the deploy integration tests: sshd containers (testcontainers), the real CLI, real A2A calls."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # no registry here for the reaper image
from testcontainers.core.container import DockerContainer  # noqa: E402
from testcontainers.core.wait_strategies import LogMessageWaitStrategy  # noqa: E402

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


def sshd_image(client) -> str:  # noqa: ANN001 - docker client
    """Build the sshd "VM" image once per Dockerfile content (kept in the engine between runs)."""
    from testcontainers.core.image import DockerImage

    digest = hashlib.sha256((FIXTURES / "sshd.Dockerfile").read_bytes() + (FIXTURES / "sshd-vm-init").read_bytes())
    tag = f"mur-sshd-test:{digest.hexdigest()[:12]}"
    try:
        client.images.get(tag)
        return tag
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
        pass
    # network_mode host: apt reaches Debian's mirror (engines here run --bridge=none)
    DockerImage(FIXTURES, tag=tag, clean_up=False, dockerfile_path="sshd.Dockerfile",
                buildargs={"BASE": BASE_IMAGE}, network_mode="host", rm=True).build()
    return tag


@dataclass
class SshdVM:
    """A running sshd container standing in for an existing VM (host network, loopback only)."""

    tc: DockerContainer
    port: int
    key: Path
    host_pub: str
    workdir: Path

    @property
    def container(self):  # noqa: ANN201 - the docker SDK container
        return self.tc.get_wrapped_container()

    def known_hosts(self, path: Path | None = None) -> Path:
        path = path or self.workdir / "known_hosts"
        kind, b64 = self.host_pub.split()[:2]
        path.write_text(f"[127.0.0.1]:{self.port} {kind} {b64}\n")
        return path

    def sh(self, cmd: str) -> tuple[int, str]:
        res = self.container.exec_run(["/bin/sh", "-c", cmd], demux=False)
        return res.exit_code, (res.output or b"").decode("utf-8", "replace")

    def procs(self) -> list[str]:
        """Command lines of every process in the container except sshd, cron, init and this probe."""
        _, out = self.sh("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
                         "[ -n \"$c\" ] && echo \"$c\"; done")
        return [ln for ln in out.splitlines() if ln.strip() and not any(
            x in ln for x in ("sshd", "/usr/sbin/cron", "docker-init", "/proc/[0-9]", "sshd-vm-init"))]

    def restart(self, unclean: bool = True) -> None:
        """A reboot: SIGKILL everything (power loss) or stop cleanly, then boot again."""
        c = self.container
        if unclean:
            c.kill()
        else:
            c.stop(timeout=10)
        c.wait(timeout=30)
        c.start()
        wait_for_ssh(self.port)

    def close(self) -> None:
        self.tc.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def wait_for_ssh(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                if s.recv(16).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"sshd did not come up on port {port}")


def sshd_container(image: str, workdir: Path, *, cron: bool = True, murmur_tmpfs: str | None = None) -> SshdVM:
    """Start one sshd "VM" (testcontainers) with a fresh host key and one client key for root and
    deployer; /run is a tmpfs, so a restart is a boot for cron's @reboot entries. `murmur_tmpfs`
    (e.g. "40m"): deployer's ~/.murmur is a filesystem of that size (a disk that fills up)."""
    workdir.mkdir(parents=True, exist_ok=True)
    key = keygen(workdir / "id_ed25519")
    host = keygen(workdir / "host_ed25519", "sshd-vm")
    pub = (workdir / "id_ed25519.pub").read_bytes()
    port = free_port()
    tc = (DockerContainer(image).with_command(str(port)).with_env("MUR_TEST_CRON", "1" if cron else "0")
          .with_tmpfs_mount("/run")
          .with_kwargs(network_mode="host", cgroupns="private", cap_add=["SYS_ADMIN"], init=True,
                       labels={"dev.mur.test": "sshd-vm"})
          .with_copy_into_container(host.read_bytes(), "/etc/ssh/test_host_ed25519_key", 0o600)
          .with_copy_into_container(pub, "/root/.ssh/authorized_keys", 0o600)
          .with_copy_into_container(pub, "/home/deployer/.ssh/authorized_keys", 0o600)
          .waiting_for(LogMessageWaitStrategy("Server listening on")))
    if murmur_tmpfs:
        tc.with_tmpfs_mount("/home/deployer/.murmur", f"size={murmur_tmpfs},uid=1000,gid=1000,mode=0755,exec")
    tc.start()
    return SshdVM(tc, port, key, (workdir / "host_ed25519.pub").read_text(), workdir)


def a2a_send(url: str, text: str, timeout: float = 300, token: str | None = None) -> str:
    """Send one task with the real A2A client (with the deployment's token); returns the answer."""
    from mur.a2a.client import Credentials, send_task, task_text

    task = send_task(url, text, timeout=timeout, credentials=Credentials(token=token))
    state = task.get("status", {}).get("state")
    assert state == "completed", f"task ended {state}: {task}"
    return task_text(task).strip()


def shell_task(*commands: str) -> str:
    """A capsule_probe task that runs each command through the `sh` shell tool (one call each)."""
    return json.dumps({"op": "invoke", "calls": [{"tool": "sh", "data": json.dumps({"command": c})} for c in commands]})


FORK_40 = "i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo started"
READ_OUTSIDE = "read x < /etc/hostname && echo read-ok"


def refused_outside(data: str) -> bool:
    """READ_OUTSIDE was stopped: Landlock refused the read (scoped) or, in a session root (sealed),
    the host's /etc/hostname does not exist for the tool at all."""
    return "read-ok" not in data and ("Permission denied" in data or "No such file" in data)


# --- faults: a deploy driven step by step, and what the target holds ----------------------------

FAST = {  # short deadlines (docs/deploy.md, "Deadlines"): a silent link is dead after 3 s
    "MUR_DEPLOY_CONNECT_TIMEOUT": "3", "MUR_DEPLOY_CONNECT_BUDGET": "4", "MUR_DEPLOY_KEEPALIVE": "0.5",
    "MUR_DEPLOY_DEAD_AFTER": "3", "MUR_DEPLOY_UNDO_BUDGET": "8", "MUR_DEPLOY_UPLOAD_STALL": "10",
}


class Deploying:
    """A `mur ...` process started in the background, its progress events in a file; `stop_at`
    ("stage:begin"): it stops itself there (MUR_DEPLOY_STOP_AT) until `cont()`."""

    def __init__(self, args: list[str], home: Path, env: dict | None = None, stop_at: str | None = None):
        self.events = home / f"events-{time.monotonic_ns()}.jsonl"
        full = {**os.environ, "HOME": str(home), "MUR_DEPLOY_EVENTS": str(self.events), **FAST, **(env or {})}
        if stop_at:
            full["MUR_DEPLOY_STOP_AT"] = stop_at
        self.proc = subprocess.Popen([sys.executable, "-m", "mur", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=full, cwd=str(ROOT))

    def seen(self) -> list[dict]:
        try:
            return [json.loads(line) for line in self.events.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            return []

    def wait_for(self, step: str, event: str = "begin", timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("step") == step and e.get("event") == event for e in self.seen()):
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"mur ended ({self.proc.returncode}) before {step}/{event}: "
                                     f"{self.proc.stderr.read()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"no {step}/{event} within {timeout}s")

    def stopped(self, timeout: float = 600) -> None:
        """Wait until it stopped itself (at `stop_at`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "?"
            if state == "T":
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"mur ended ({self.proc.returncode}) before it stopped: "
                                     f"{self.proc.stderr.read()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"it did not stop within {timeout}s")

    def cont(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def finish(self, timeout: float = 600) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


def murmur_files(vm: SshdVM, home: str = "/root") -> list[str]:
    """Everything under the target user's ~/.murmur (empty when it does not exist)."""
    return [ln for ln in vm.sh(f"find {home}/.murmur 2>/dev/null")[1].splitlines() if ln.strip()]


def serving_release(vm: SshdVM, port: int) -> int | None:
    """The release the process listening on `port` runs (its working directory), read on the VM."""
    from mur.deploy.observe import serving_command

    out = vm.sh(serving_command(port))[1]
    for line in out.splitlines():
        if line.startswith("@@serving "):
            cwd = line.split(" ", 2)[2]
            part = cwd.split("/releases/")[-1].split("/")[0] if "/releases/" in cwd else ""
            return int(part) if part.isdigit() else None
    return None


def current_release(vm: SshdVM, dep: str, home: str = "/root") -> int | None:
    link = vm.sh(f"readlink {home}/.murmur/deployments/{dep}/current")[1].strip()
    return int(link.rsplit("/", 1)[-1]) if link.rsplit("/", 1)[-1].isdigit() else None
