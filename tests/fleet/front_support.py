"""Real processes for the front's tests: A2A backends (tests/fleet/a2a_backend.py), `mur front run`, and
a client that sends a task every 50 ms and follows each to its end, counting every failure."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mur.front.config import STATE_NAME, Backend, FrontConfig, read_state, write_json
from mur.front.control import FrontControl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_shell(cmd: str) -> str:
    return subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=30).stdout


@dataclass
class Proc:
    popen: subprocess.Popen
    port: int
    name: str = ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def start_backend(name: str, token_file: Path, delay: float = 1.5, port: int | None = None,
                  tls: tuple[Path, Path] | None = None, queue_depth: int = 64) -> Proc:
    port = port or free_port()
    argv = [sys.executable, str(HERE / "a2a_backend.py"), "--name", name, "--port", str(port),
            "--token-file", str(token_file), "--delay", str(delay), "--queue-depth", str(queue_depth)]
    if tls:
        argv += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    assert line.strip(), f"backend {name} did not start"
    return Proc(p, port, name)


def start_front(front_dir: Path, log: Path) -> Proc:
    cfg = json.loads((front_dir / "front.json").read_text())
    before = (read_state(front_dir / STATE_NAME) or {}).get("pid")
    p = subprocess.Popen([sys.executable, "-m", "mur", "front", "run", "--config", str(front_dir / "front.json")],
                         stdout=subprocess.DEVNULL, stderr=open(log, "ab"), cwd=str(ROOT))  # noqa: SIM115
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = read_state(front_dir / STATE_NAME) or {}
        if state.get("pid") == p.pid and state.get("pid") != before:
            return Proc(p, cfg["listen_port"], "front")
        assert p.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError(f"the front did not start:\n{log.read_text()}")


def first_config(front_dir: Path, listen: int, backend: Backend, token_file: Path, **kw) -> FrontConfig:
    front_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    cfg = FrontConfig(listen_port=listen, backends=(backend,), token_file=str(token_file), **kw)
    write_json(front_dir / "front.json", cfg.to_dict())
    return cfg


def control(front_dir: Path) -> FrontControl:
    return FrontControl(local_shell, str(front_dir), poll=0.05)


@dataclass
class Traffic:
    """Sends `message/send` every `every` seconds through `url` and follows each task to its end."""

    url: str
    token: str
    every: float = 0.05
    pin: str | None = None
    sent: list[tuple[str, str]] = field(default_factory=list)  # (text, task id)
    answers: dict[str, str] = field(default_factory=dict)  # task id -> answer text
    failures: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # texts to send next (e.g. "slow ...")

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> "Traffic":
        t = threading.Thread(target=self._run, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _client(self):  # noqa: ANN202
        from mur.a2a.client import A2AClient, Credentials

        return A2AClient(self.url, timeout=60, credentials=Credentials(token=self.token, pin_sha256=self.pin))

    def _run(self) -> None:
        n = 0
        with self._client() as client:
            while not self._stop.is_set():
                text = self.extra.pop(0) if self.extra else f"m{n}"
                n += 1
                t0 = time.monotonic()
                try:
                    task = client.send(text)
                    self.sent.append((text, task["id"]))
                    if task["status"]["state"] == "rejected":
                        self.failures.append(f"{text}: rejected {task['status']}")
                    else:
                        w = threading.Thread(target=self._follow, args=(text, task["id"]), daemon=True)
                        w.start()
                        self._threads.append(w)
                except Exception as exc:  # noqa: BLE001 - every failure is what the test counts
                    self.failures.append(f"{text}: {exc}")
                self._stop.wait(max(0.0, self.every - (time.monotonic() - t0)))

    def _follow(self, text: str, tid: str) -> None:
        deadline = time.monotonic() + 60
        try:
            with self._client() as client:
                while time.monotonic() < deadline:
                    task = client.get_task(tid)
                    state = task["status"]["state"]
                    if state == "completed":
                        from mur.a2a.client import task_text

                        self.answers[tid] = task_text(task).strip()
                        return
                    if state in ("failed", "canceled", "rejected"):
                        self.failures.append(f"{text}: ended {state}")
                        return
                    time.sleep(0.05)
            self.failures.append(f"{text}: still open after 60 s")
        except Exception as exc:  # noqa: BLE001
            self.failures.append(f"{text} (tasks/get): {exc}")

    def stop(self) -> None:
        self._stop.set()
        self._threads[0].join(70)  # the sender first: it starts the last followers
        for t in list(self._threads):
            t.join(70)


def write_token(path: Path) -> str:
    token = "t0k3n-" + os.urandom(8).hex()
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token
