"""Targets and operators of the deploy fault suite: an sshd "VM" behind a fault relay (Box), a HOME
running this checkout's `mur` (Operator), and one running command whose progress is watched (Run).

Everything the checks read on the target goes around the relay (docker exec, or SSH straight to
sshd), so a fault in the link never hides what is true there.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from deploy_support import ROOT, SshdVM, keygen, sshd_container, wait_for_ssh
from mur.testing.relay import Relay

# --- knobs ---------------------------------------------------------------------------------------

SOAK = os.environ.get("MUR_FAULTS_SOAK", "") not in ("", "0")  # more seeds per scenario (x4)
SEEDS = int(os.environ.get("MUR_FAULTS_SEEDS") or 0)  # exactly this many seeds per scenario
LANES = int(os.environ.get("MUR_FAULTS_LANES") or 3)  # targets worked on at once
# every command's timing: MUR_FAULTS_VERBOSE=1 on stderr, =FILE appended to FILE (the seeds run in
# background threads, so stderr lands in whichever test pytest is capturing)
VERBOSE = os.environ.get("MUR_FAULTS_VERBOSE", "") not in ("", "0")
_VERBOSE_LOCK = threading.Lock()


def say(text: str) -> None:
    dest = os.environ.get("MUR_FAULTS_VERBOSE", "")
    with _VERBOSE_LOCK:
        if dest == "1":
            print(text, file=sys.stderr)
        else:
            with open(dest, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
SEED_BASE = int(os.environ.get("MUR_FAULTS_SEED") or 0)  # set to reproduce one run's random points
CTRL_C_BOUND = 10.0  # "one Ctrl-C always ends the command within a few seconds"
# Short deadlines for the product's own waits (mur/deploy/deadlines.py, docs/deploy.md "Deadlines"),
# so a silent link fails in seconds here; a little more tolerant than tests/deploy/README-faults.md's
# example, since two lanes share 2 cores with everyone else.
FAST_ENV = {
    "MUR_DEPLOY_CONNECT_TIMEOUT": "3",
    "MUR_DEPLOY_CONNECT_BUDGET": "6",
    "MUR_DEPLOY_KEEPALIVE": "1",
    "MUR_DEPLOY_DEAD_AFTER": "4",
    "MUR_DEPLOY_COMMAND_TIMEOUT": "90",
    "MUR_DEPLOY_UPLOAD_STALL": "5",
    "MUR_DEPLOY_UNDO_BUDGET": "6",
    "MUR_DEPLOY_START_TIMEOUT": "60",
}
# A silent link ends a command "within about DEAD_AFTER + UNDO_BUDGET seconds" (docs): that, plus
# slack for a loaded machine, is how long a command may take to give up after the link went silent.
SILENT_BOUND = 4 + 6 + 10.0
LOCK_ERROR = re.compile(r"error\[E-DEPLOY-013\]:[^\n]*lock", re.I)  # the lock's own code (docs/errors.md)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
STATES = ("running", "crash-looping", "stopped", "diverged", "incomplete", "failed", "starting")


# --- a target behind a relay ---------------------------------------------------------------------


@dataclass
class Box:
    """One sshd "VM" (a container, host network, loopback) with a fault relay in front of its sshd."""

    vm: SshdVM
    relay: Relay
    user: str = "root"
    baseline: set[str] = field(default_factory=set)
    closed: bool = False

    @classmethod
    def start(cls, image: str, workdir: Path, *, user: str = "root", cron: bool = True,
              home_size: str | None = None) -> "Box":
        vm = sshd_container(image, workdir, cron=cron) if home_size is None else \
            small_home_container(image, workdir, user, home_size)
        try:
            relay = Relay(vm.port, port=quiet_port(), name=f"relay-{vm.port}")
        except BaseException:
            vm.close()
            raise
        box = cls(vm, relay, user)
        kind, b64 = vm.host_pub.split()[:2]
        box.known_hosts.write_text(f"[127.0.0.1]:{relay.port} {kind} {b64}\n")
        box.baseline = box.home_tree()
        return box

    @property
    def known_hosts(self) -> Path:
        return self.vm.workdir / "known_hosts_relay"

    @property
    def home(self) -> str:
        return "/root" if self.user == "root" else f"/home/{self.user}"

    def args(self, user: str | None = None, direct: bool = False) -> list[str]:
        """The target options of mur: through the relay, or (`direct`) straight to sshd, another route."""
        port, kh = (self.vm.port, self.vm.known_hosts()) if direct else (self.relay.port, self.known_hosts)
        return ["--host", "127.0.0.1", "--ssh-port", str(port), "--ssh-user", user or self.user,
                "--ssh-key", str(self.vm.key), "--known-hosts", str(kh)]

    def sh(self, cmd: str) -> tuple[int, str]:
        return self.vm.sh(cmd)

    def out(self, cmd: str) -> str:
        return self.vm.sh(cmd)[1]

    def dep_root(self, dep: str) -> str:
        return f"{self.home}/.murmur/deployments/{dep}"

    def home_tree(self) -> set[str]:
        return {ln for ln in self.out(f"find {self.home} -xdev 2>/dev/null").splitlines() if ln.strip()}

    def mur_procs(self) -> list[str]:
        return [p for p in self.vm.procs() if "mur" in p]

    def restart(self, unclean: bool = True) -> None:
        """A reboot of the target (the relay stays: connections through it drop with the sshd)."""
        self.relay.cut(rst=True)
        self.vm.restart(unclean=unclean)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.relay.close()
        finally:
            self.vm.close()


def quiet_port() -> int:
    """A free loopback port above the services' range (mur.deploy.plan.PORT_RANGE, 20000-40000):
    every target here shares this machine's network, so the harness's own listeners keep out of it."""
    import random as _random
    import socket

    for _ in range(200):
        port = _random.randint(41000, 60999)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 41000-60999")


# Findings that do not stop a scenario (a missing hint): kept per worker thread, reported by the
# scheduler once the scenario's checks that matter more have passed.
_FINDINGS = threading.local()


def finding(text: str) -> None:
    if not hasattr(_FINDINGS, "items"):
        _FINDINGS.items = []
    _FINDINGS.items.append(text)


def take_findings() -> list[str]:
    items = getattr(_FINDINGS, "items", [])
    _FINDINGS.items = []
    return items


def small_home_container(image: str, workdir: Path, user: str, size: str) -> SshdVM:
    """An sshd "VM" whose deploy user's home is a small filesystem of its own (a tmpfs with size=):
    the key is put in after start, since the mount hides what the image had there."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    from deploy_support import free_port

    workdir.mkdir(parents=True, exist_ok=True)
    key = keygen(workdir / "id_ed25519")
    host = keygen(workdir / "host_ed25519", "sshd-vm")
    pub = (workdir / "id_ed25519.pub").read_bytes()
    port = free_port()
    home = "/root" if user == "root" else f"/home/{user}"
    uid = "0" if user == "root" else "1000"
    tc = (DockerContainer(image).with_command(str(port)).with_env("MUR_TEST_CRON", "1")
          .with_tmpfs_mount("/run")
          # testcontainers hands the value to Docker as the mount's options
          .with_tmpfs_mount(home, f"size={size},mode=0755,uid={uid},gid={uid},exec")
          .with_kwargs(network_mode="host", cgroupns="private", cap_add=["SYS_ADMIN"], init=True,
                       labels={"dev.mur.test": "sshd-vm"})
          .with_copy_into_container(host.read_bytes(), "/etc/ssh/test_host_ed25519_key", 0o600)
          .with_copy_into_container(pub, "/root/.ssh/authorized_keys", 0o600)
          .waiting_for(LogMessageWaitStrategy("Server listening on")))
    tc.start()
    vm = SshdVM(tc, port, key, (workdir / "host_ed25519.pub").read_text(), workdir)
    q = shlex.quote
    rc, out = vm.sh(f"mkdir -p {home}/.ssh && printf '%s' {q(pub.decode())} > {home}/.ssh/authorized_keys && "
                    f"chmod 700 {home}/.ssh && chmod 600 {home}/.ssh/authorized_keys && chown -R {uid}:{uid} {home}/.ssh")
    if rc != 0:
        vm.close()
        raise RuntimeError(f"cannot prepare the small home: {out}")
    wait_for_ssh(port)
    return vm


# --- an operator: a HOME and the real CLI ---------------------------------------------------------


class Operator:
    """One person at a terminal: their own HOME (records, keys) and this checkout's `mur`."""

    def __init__(self, home: Path, env: dict[str, str] | None = None):
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **FAST_ENV, "HOME": str(home), "COLUMNS": "200", **(env or {})}
        self.log: list[str] = []  # what each command printed (for a failing scenario's message)

    def mur(self, *args: str, timeout: float = 300, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, timeout=timeout,
                              env={**self.env, **(env or {})}, cwd=str(ROOT))
        self._note(args, proc.returncode, proc.stderr, proc.stdout, time.monotonic() - t0)
        if check and proc.returncode != 0:
            raise AssertionError(f"mur {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return proc

    def json(self, *args: str, check: bool = True, **kw: Any) -> dict | list:
        proc = self.mur(*args, "--json", check=check, **kw)
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise AssertionError(f"mur {' '.join(args)} --json printed no JSON ({proc.returncode}):\n"
                                 f"{proc.stdout[-1000:]}\n{proc.stderr[-2000:]}") from None

    def spawn(self, *args: str, tty: bool = False, env: dict[str, str] | None = None) -> "Run":
        return Run(self, [sys.executable, "-m", "mur", *args], {**self.env, **(env or {})}, tty=tty)

    def records(self) -> list[dict]:
        return self.json("deploy", "ls")  # type: ignore[return-value]

    def _note(self, args: tuple, rc: int | None, err: str, out: str, took: float) -> None:
        if VERBOSE:
            say(f"[{time.strftime('%H:%M:%S')}] {threading.current_thread().name}: mur "
                f"{' '.join(a for a in args if len(a) < 60)[:150]} -> {rc} in {took:.1f}s")
        self.log.append(f"$ mur {' '.join(args)}  -> rc {rc} in {took:.1f}s\n{_tail(err, 25)}"
                        + (f"\n[stdout] {out.strip()[-300:]}" if out.strip() else ""))


class Run:
    """A running `mur` command whose stderr is watched line by line; `on(pattern, action)` runs the
    action the moment a line matches (mur's own progress: `· upload release 2`, ...).

    With `tty=True` mur runs as a terminal's foreground job: its stdin and stderr are a pty that is
    its controlling terminal (setsid -c), and `ctrl_c()` types ^C into it, so the kernel's line
    discipline sends SIGINT to the foreground process group, exactly as a terminal does."""

    def __init__(self, op: Operator, argv: list[str], env: dict[str, str], tty: bool = False):
        self.op, self.argv = op, argv
        self.lines: list[tuple[float, str]] = []
        self.stdout = ""
        self._hooks: list[tuple[re.Pattern, Callable[[], None], list[bool]]] = []
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.t0 = time.monotonic()
        self.wall0 = time.time()  # lines' offsets + this: compare with the target's log timestamps
        self.signalled_at: float | None = None
        self.master: int | None = None
        if tty:
            master, slave = pty.openpty()
            import fcntl
            import struct
            import termios

            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
            # not a new session from Popen: setsid(1) then makes one without forking, so the pid
            # is mur's own, and -c makes the pty (its stdin) the controlling terminal
            self.proc = subprocess.Popen(["setsid", "-c", *argv], stdin=slave, stdout=subprocess.PIPE, stderr=slave,
                                         env=env, cwd=str(ROOT))
            os.close(slave)
            self.master = master
            err_fd = master
        else:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         env=env, cwd=str(ROOT), start_new_session=True)
            err_fd = self.proc.stderr.fileno()  # type: ignore[union-attr]
        self._err_reader = threading.Thread(target=self._read_err, args=(err_fd,), daemon=True)
        self._out_reader = threading.Thread(target=self._read_out, daemon=True)
        self._err_reader.start()
        self._out_reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stderr(self) -> str:
        return "\n".join(text for _, text in self.lines)

    def _read_out(self) -> None:
        self.stdout = self.proc.stdout.read().decode("utf-8", "replace")  # type: ignore[union-attr]

    def _read_err(self, fd: int) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pty master reads EIO once the child side is closed
                chunk = b""
            if not chunk:
                break
            buf += chunk
            *done, buf = buf.split(b"\n")
            for raw in done:
                self._line(raw)
        if buf:
            self._line(buf)

    def _line(self, raw: bytes) -> None:
        text = ANSI.sub("", raw.decode("utf-8", "replace"))
        with self._lock:
            self.lines.append((time.monotonic() - self.t0, text))
            hooks = [h for h in self._hooks if not h[2][0] and h[0].search(text)]
            for h in hooks:
                h[2][0] = True
            self._changed.notify_all()
        for _, action, _ in hooks:
            action()

    def on(self, pattern: str, action: Callable[[], None], delay: float = 0.0) -> None:
        """Run `action` once, `delay` seconds after the first stderr line matching `pattern`.

        `finish` fails when the command ended without ever printing such a line: a scenario whose
        fault never fired must not pass (say, because mur's progress text changed)."""
        def late() -> None:
            if self.proc.poll() is None:  # never fault a link or a process after the command ended
                action()

        def fire() -> None:
            if delay > 0:
                timer = threading.Timer(delay, late)
                self._timers.append(timer)
                timer.start()
            else:
                action()

        with self._lock:
            self._hooks.append((re.compile(pattern), fire, [False]))
            already = any(re.search(pattern, text) for _, text in self.lines)
            if already:
                self._hooks[-1][2][0] = True
        if already:
            fire()

    def seen(self, pattern: str) -> bool:
        with self._lock:
            return any(re.search(pattern, text) for _, text in self.lines)

    def wait_line(self, pattern: str, timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not any(re.search(pattern, text) for _, text in self.lines):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    return False
                self._changed.wait(0.2)
        return True

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.signalled_at = time.monotonic()
            os.kill(self.proc.pid, signal.SIGKILL)

    def ctrl_c(self) -> None:
        """^C typed into the terminal (tty mode), else SIGINT to the process group as a shell does."""
        if self.proc.poll() is not None:
            return
        self.signalled_at = self.signalled_at or time.monotonic()
        if self.master is not None:
            os.write(self.master, b"\x03")
        else:
            os.killpg(self.proc.pid, signal.SIGINT)

    def finish(self, timeout: float = 300) -> int:
        """Wait for the exit; kills it (and fails) when it outlives `timeout`."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.close()
            self.op._note(tuple(self.argv[3:]), None, self.stderr, self.stdout, time.monotonic() - self.t0)
            raise AssertionError(f"mur {' '.join(self.argv[3:])} still ran after {timeout:.0f}s "
                                 f"(killed):\n{_tail(self.stderr, 30)}") from None
        self.ended_at = time.monotonic()
        self._err_reader.join(10)
        self._out_reader.join(10)
        self.op._note(tuple(self.argv[3:]), rc, self.stderr, self.stdout, self.ended_at - self.t0)
        self.close()
        missed = [h[0].pattern for h in self._hooks if not h[2][0]]
        if missed:
            raise AssertionError(f"mur ended (exit {rc}) before its progress showed {missed}: the fault never "
                                 f"fired\n{_tail(self.stderr, 25)}")
        return rc

    @property
    def since_signal(self) -> float:
        """Seconds from the first Ctrl-C / kill to the exit."""
        return (self.ended_at - self.signalled_at) if self.signalled_at else 0.0

    def result(self) -> dict | None:
        try:
            return json.loads(self.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        if self.master is not None:
            try:
                os.close(self.master)
            except OSError:
                pass
            self.master = None


def _tail(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


