"""The deploy fault suite's harness: sshd targets behind a fault relay, operators running the real
`mur` CLI, and the checks every scenario ends with.

    box = Box.start(image, workdir)                 # an sshd "VM" (testcontainers) + a Relay in front
    op = Operator(home)                             # a HOME and the CLI (this checkout's .venv)
    run = op.spawn("deploy", "-m", m, *box.args())  # a running mur: watch its stderr, fault it
    run.on(r"· start release", lambda: box.relay.blackhole())
    rc = run.finish()
    check_consistent(box, op, dep_id)               # record == current == what serves
    op.mur("deploy", "destroy", dep_id); check_nothing_left(box)

Everything the checks read on the target goes around the relay (docker exec, or SSH straight to
sshd), so a fault in the link never hides what is true there. What serves is asked of the
service itself: every release of a scenario is deployed with its own greeting
(`--env HELLO_GREETING=gN`), and a real A2A task answered "gN, probe!" says which one runs.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pty  # noqa: E402 - Linux only, as the suite

from deploy_support import ROOT, SshdVM, keygen, sshd_container, wait_for_ssh
from mur.testing.relay import Relay

# --- knobs ---------------------------------------------------------------------------------------

SOAK = os.environ.get("MUR_FAULTS_SOAK", "") not in ("", "0")
SEEDS = int(os.environ.get("MUR_FAULTS_SEEDS") or (8 if SOAK else 2))
LANES = int(os.environ.get("MUR_FAULTS_LANES") or 2)  # targets worked on at once (2 cores here)
VERBOSE = os.environ.get("MUR_FAULTS_VERBOSE", "") not in ("", "0")  # every command's timing on stderr
SEED_BASE = int(os.environ.get("MUR_FAULTS_SEED") or 0)  # set to reproduce one run's random points
CTRL_C_BOUND = 10.0  # "one Ctrl-C always ends the command within a few seconds"
# Short deadlines for the product's own waits (mur/deploy/deadlines.py, docs/deploy.md "Deadlines"),
# so a silent link fails in seconds here. SILENT_BOUND: how long a command may take to give up on a
# link that went silent (the link is declared dead, the undo tries and gives up, plus slack).
FAST_ENV = {
    "MUR_DEPLOY_CONNECT_TIMEOUT": "4",
    "MUR_DEPLOY_CONNECT_BUDGET": "8",
    "MUR_DEPLOY_KEEPALIVE": "1",
    "MUR_DEPLOY_DEAD_AFTER": "4",
    "MUR_DEPLOY_COMMAND_TIMEOUT": "90",
    "MUR_DEPLOY_UPLOAD_STALL": "5",
    "MUR_DEPLOY_UNDO_BUDGET": "8",
    "MUR_DEPLOY_START_TIMEOUT": "60",
}
SILENT_BOUND = 4 + 8 + 8 + 15.0
LOCK_ERROR = re.compile(r"error\[E-DEPLOY-\d+\]:[^\n]*(lock|held by|in progress|busy|another)", re.I)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
STATES = ("running", "crash-looping", "stopped", "diverged", "incomplete", "failed", "starting")


def seeds(name: str, count: int | None = None) -> list[int]:
    """The seeds of a scenario: stable per name (reproducible), shifted by MUR_FAULTS_SEED."""
    base = sum(map(ord, name)) * 1000 + SEED_BASE
    return [base + i for i in range(count or SEEDS)]


# --- a target behind a relay ---------------------------------------------------------------------


@dataclass
class Box:
    """One sshd "VM" (a container, host network, loopback) with a fault relay in front of its sshd."""

    vm: SshdVM
    relay: Relay
    user: str = "root"
    baseline: set[str] = field(default_factory=set)

    @classmethod
    def start(cls, image: str, workdir: Path, *, user: str = "root", cron: bool = True,
              home_size: str | None = None) -> "Box":
        vm = sshd_container(image, workdir, cron=cron) if home_size is None else \
            small_home_container(image, workdir, user, home_size)
        try:
            relay = Relay(vm.port, name=f"relay-{vm.port}")
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
        try:
            self.relay.close()
        finally:
            self.vm.close()


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
            print(f"[{time.strftime('%H:%M:%S')}] mur {' '.join(a for a in args if len(a) < 60)[:160]} -> {rc} "
                  f"in {took:.1f}s", file=sys.stderr)
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
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.t0 = time.monotonic()
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
        """Run `action` once, `delay` seconds after the first stderr line matching `pattern`."""
        def fire() -> None:
            if delay > 0:
                threading.Timer(delay, action).start()
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


# --- what is true on the target -----------------------------------------------------------------


@dataclass
class Truth:
    record: dict  # `mur deploy status --json`
    status_rc: int
    current: int | None  # the release `current` names on the target
    releases: dict[int, dict]  # every release directory: {"complete": bool, "greeting": str | None}
    serving: str | None  # the greeting the service answered with (None: nothing answers)
    card: dict | None
    supervisors: int
    services: int

    def describe(self) -> str:
        return (f"record status={self.record.get('status')} release={self.record.get('release')} "
                f"(rc {self.status_rc}); current={self.current}; releases={self.releases}; serving={self.serving!r}; "
                f"supervisors={self.supervisors} services={self.services}")


def greeting_of(box: Box, dep: str, n: int) -> str | None:
    text = box.out(f"cat {box.dep_root(dep)}/releases/{n}/env 2>/dev/null")
    m = re.search(r"HELLO_GREETING=\"?([^\"\n]*)", text)
    return m.group(1) if m else None


def ask_service(box: Box, op: Operator, rec: dict, timeout: float = 60) -> tuple[str | None, dict | None]:
    """What answers on the deployment's port, asked straight through sshd (not the relay): the
    agent card and the greeting of a real task, with the deployment's token (and TLS pin)."""
    import httpx

    from mur.a2a.client import Credentials, send_task, ssl_context, task_text
    from mur.deploy.targets.ssh import SSHTarget
    from mur.errors import MurError

    token_file, port = rec.get("token_file"), rec.get("service_port")
    if not token_file or not port or not Path(token_file).exists():
        return None, None
    token = Path(token_file).read_text().strip()
    creds = Credentials(token=token, pin_sha256=rec.get("tls_pin"))
    scheme = "https" if rec.get("tls_pin") else "http"
    try:
        target = SSHTarget("127.0.0.1", user=box.user, port=box.vm.port, key_file=str(box.vm.key),
                           known_hosts=str(box.vm.known_hosts()), connect_budget=10)
    except MurError:
        return None, None
    try:
        with target.forward(int(port)) as fw:
            url = f"{scheme}://127.0.0.1:{fw.port}"
            card = None
            try:
                r = httpx.get(f"{url}/.well-known/agent-card.json", headers={"Authorization": f"Bearer {token}"},
                              verify=ssl_context(creds), timeout=10)
                card = r.json() if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                return None, None
            try:
                task = send_task(url, "probe", timeout=timeout, credentials=creds)
            except Exception:  # noqa: BLE001 - it does not answer: that is the finding
                return None, card
            if task.get("status", {}).get("state") != "completed":
                return None, card
            text = task_text(task).strip()
            m = re.match(r"(.*), probe!$", text)
            return (m.group(1) if m else f"?{text}"), card
    finally:
        target.close()


def truth(box: Box, op: Operator, dep: str) -> Truth:
    proc = op.mur("deploy", "status", dep, "--json", check=False, timeout=120)
    try:
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        rec = {"status": None, "error": _tail(proc.stderr, 5)}
    root = box.dep_root(dep)
    cur = box.out(f"readlink {root}/current 2>/dev/null").strip()
    current = int(cur.rsplit("/", 1)[-1]) if cur.rsplit("/", 1)[-1].isdigit() else None
    releases: dict[int, dict] = {}
    for name in box.out(f"ls -1 {root}/releases 2>/dev/null").split():
        if name.isdigit():
            n = int(name)
            releases[n] = {"complete": box.sh(f"test -s {root}/releases/{n}/release.json")[0] == 0,
                           "greeting": greeting_of(box, dep, n)}
    serving, card = ask_service(box, op, rec) if rec.get("service_port") else (None, None)
    procs = box.mur_procs()
    sup = [p for p in procs if "supervise run" in p and dep in p]
    svc = [p for p in procs if " run " in f" {p} " and "--manifest" in p and dep in p and "supervise" not in p]
    return Truth(rec, proc.returncode, current, releases, serving, card, len(sup), len(svc))


def check_consistent(box: Box, op: Operator, dep: str, *, expect: str | None = None,
                     allow_stopped: bool = False, settle: float = 0) -> Truth:
    """Exactly one consistent release serving (or, when allowed, cleanly stopped): the record, the
    target's `current` and what answers name the same release; nothing half-written is visible."""
    t = truth(box, op, dep)
    if settle and (t.serving is None or t.record.get("status") != "running"):
        time.sleep(settle)
        t = truth(box, op, dep)
    why = []
    status = t.record.get("status")
    if status == "running":
        if t.serving is None:
            why.append("the record says running but nothing answers")
        if t.current is None or t.current not in t.releases:
            why.append("`current` names no release")
        elif t.serving is not None and t.serving != t.releases[t.current]["greeting"]:
            why.append(f"what serves ({t.serving}) is not `current` (release {t.current}: "
                       f"{t.releases[t.current]['greeting']})")
        if t.record.get("release") != t.current:
            why.append(f"the record's release {t.record.get('release')} is not `current` ({t.current})")
        if t.supervisors > 1 or t.services > 1:
            why.append(f"{t.supervisors} supervisors and {t.services} services run for one deployment")
        if t.status_rc != 0:
            why.append(f"status exit code {t.status_rc} for a running deployment")
    elif status == "stopped" and allow_stopped:
        if t.serving is not None or t.services:
            why.append("stopped, yet something serves")
    else:
        why.append(f"state {status!r} (wanted running{' or stopped' if allow_stopped else ''})")
    if expect is not None and t.serving != expect:
        why.append(f"serving {t.serving!r}, expected {expect!r}")
    half = [n for n, r in t.releases.items() if not r["complete"]]
    if half:
        why.append(f"half-written release(s) visible: {half}")
    if len(t.releases) > 5:
        why.append(f"{len(t.releases)} releases kept (at most 5)")
    leftovers = staging_leftovers(box)
    if leftovers:
        why.append(f"staging leftovers: {leftovers[:8]}")
    if why:
        raise AssertionError("inconsistent: " + "; ".join(why) + "\n  " + t.describe())
    return t


def staging_leftovers(box: Box) -> list[str]:
    """Temporary upload names and staging areas anywhere in the deploy user's home (a serving
    session's payload cache is not one: it goes with its session, and destroy is checked whole)."""
    out = box.out(f"find {box.home}/.murmur -xdev \\( -name '*mur-tmp*' -o -name '*.part' "
                  f"-o -name 'staging' -o -path '*/staging/*' \\) 2>/dev/null")
    return [ln for ln in out.splitlines() if ln.strip()]


def check_nothing_left(box: Box) -> None:
    """After the last destroy: the deploy user's whole home is as before the first deploy, no mur
    process runs, no cgroup, crontab entry or temp payload of a deployment is left."""
    extra = sorted(box.home_tree() - box.baseline)
    problems = []
    if extra:
        problems.append(f"{len(extra)} path(s) left in {box.home}: {extra[:12]}")
    procs = box.mur_procs()
    if procs:
        problems.append(f"processes left: {procs[:6]}")
    cg = box.out("find /sys/fs/cgroup -name 'dep_*' 2>/dev/null").split()
    if cg:
        problems.append(f"cgroups left: {cg[:6]}")
    cron = box.out("crontab -l -u root 2>/dev/null; crontab -l -u deployer 2>/dev/null")
    if "mur:" in cron:
        problems.append(f"crontab entries left: {cron.strip()}")
    tmp = box.out("ls -d /tmp/mur-* /var/tmp/mur-* 2>/dev/null").split()
    if tmp:
        problems.append(f"temp files left: {tmp}")
    if problems:
        raise AssertionError("something is left after destroy: " + "; ".join(problems))


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, f"a traceback reached the user:\n{_tail(text, 40)}"


# --- lanes: seeds on parallel targets ------------------------------------------------------------


@dataclass
class Seed:
    seed: int
    index: int  # position among the scenario's seeds (fault kinds cycle with it)
    rng: random.Random

    def pick(self, options: list | tuple):
        """Cycle through `options` with the seed's index (every option runs once the seeds are enough)."""
        return options[self.index % len(options)]


@dataclass
class Lane:
    """One target and one operator, working through some of a scenario's seeds one after another."""

    number: int
    box: Box
    op: Operator
    manifest: str
    workdir: Path
    dep: str | None = None
    greeting: str | None = None
    counter: int = 0
    notes: list[str] = field(default_factory=list)

    def next_greeting(self) -> str:
        self.counter += 1
        return f"g{self.number}x{self.counter}"

    def deploy_args(self, greeting: str, *extra: str, direct: bool = False) -> list[str]:
        return ["deploy", "-m", self.manifest, *self.box.args(direct=direct), "--env", f"HELLO_GREETING={greeting}",
                *extra, "--json"]

    def seed_dir(self, rng: random.Random, mib: tuple[float, float] = (2, 5)) -> tuple[Path, int]:
        """A fresh workdir seed (--workdir) of random content: a redeploy that uploads megabytes."""
        d = self.workdir / f"seed-{self.counter}-{rng.randrange(1 << 30)}"
        d.mkdir(parents=True)
        size = int(rng.uniform(*mib) * (1 << 20))
        (d / "blob.bin").write_bytes(rng.randbytes(size))
        return d, size

    def deploy(self, greeting: str | None = None, *extra: str) -> dict:
        """A plain deploy through a healthy link; it must succeed (the caller checks what serves)."""
        self.box.relay.pass_through()
        greeting = greeting or self.next_greeting()
        res = self.op.json(*self.deploy_args(greeting, *extra)[:-1])
        self.dep, self.greeting = res["deployment_id"], greeting  # type: ignore[index]
        return res  # type: ignore[return-value]

    def repair(self, greeting: str | None = None) -> Truth:
        """After a fault, with the link back: the next deploy must succeed and leave everything
        consistent, whatever the fault left behind."""
        greeting = greeting or self.greeting or self.next_greeting()
        self.deploy(greeting)
        return check_consistent(self.box, self.op, self.dep, expect=greeting)  # type: ignore[arg-type]

    def destroy_all(self) -> None:
        self.box.relay.pass_through()
        for rec in self.op.records():
            self.op.mur("deploy", "destroy", rec["deployment_id"])
        check_nothing_left(self.box)


class LanePool:
    """Targets that serve a deployment, shared by the scenarios of a session (a target and its first
    deploy cost more than most faults). A lane goes back only in a consistent state; at the end
    every lane is destroyed and checked for leftovers."""

    def __init__(self, image: str, manifest: Path, tmp: Path):
        self.image, self.manifest, self.tmp = image, manifest, tmp
        self.idle: list[Lane] = []
        self.made = 0
        self._lock = threading.Lock()

    def fresh(self, *, user: str = "root", home_size: str | None = None, serving: bool = True) -> Lane:
        with self._lock:
            self.made += 1
            number = self.made
        wd = self.tmp / f"lane{number}"
        box = Box.start(self.image, wd / "sshd", user=user, home_size=home_size)
        lane = Lane(number, box, Operator(wd / "home"), str(self.manifest), wd)
        if serving:
            try:
                lane.deploy()
            except BaseException:
                box.close()
                raise
        return lane

    def take(self) -> Lane:
        with self._lock:
            if self.idle:
                return self.idle.pop()
        return self.fresh()

    def give(self, lane: Lane) -> None:
        with self._lock:
            self.idle.append(lane)

    def close(self) -> list[str]:
        failures = []
        with ThreadPoolExecutor(max(1, len(self.idle))) as pool:
            def end(lane: Lane) -> None:
                try:
                    lane.destroy_all()
                except BaseException as exc:  # noqa: BLE001
                    failures.append(_report("destroy at the end", lane.number, lane, exc))
                finally:
                    lane.box.close()
            list(pool.map(end, self.idle))
        self.idle.clear()
        return failures


def run_lanes(name: str, scenario: Callable[[Lane, Seed], None], pool: LanePool, *, shared: bool = True,
              serving: bool = True, count: int | None = None, user: str = "root",
              home_size: str | tuple[str, ...] | None = None, lanes: int | None = None) -> None:
    """Run `scenario(lane, seed)` once per seed, the seeds spread over LANES targets at once.

    `shared`: the lanes come from the session's pool (a serving deployment, consistent) and go back
    to it after a final consistency check; otherwise each lane is a fresh target (`serving`: with a
    first deploy done; `user`, `home_size`: of the target, a tuple: one size per lane) that ends with destroy and the
    nothing-left check. A failed seed is reported with its seed, the commands' output and the
    relay's events; its lane continues on a fresh target."""
    all_seeds = seeds(name, count)
    n_lanes = max(1, min(lanes or LANES, len(all_seeds)))
    plan = [list(enumerate(all_seeds))[i::n_lanes] for i in range(n_lanes)]
    failures: list[str] = []

    def get(number: int) -> Lane:
        if shared:
            return pool.take()
        size = home_size[number % len(home_size)] if isinstance(home_size, tuple) else home_size
        lane = pool.fresh(user=user, home_size=size, serving=serving)
        if size:
            lane.notes.append(f"the deploy user's home is a {size} filesystem")
        return lane

    def work(number: int, lane_seeds: list[tuple[int, int]]) -> None:
        lane: Lane | None = None
        try:
            for index, seed in lane_seeds:
                try:
                    lane = lane or get(number)
                    lane.notes.append(f"seed {seed}")
                    scenario(lane, Seed(seed, index, random.Random(seed)))
                except BaseException as exc:  # noqa: BLE001 - reported with its seed below
                    failures.append(_report(name, seed, lane, exc))
                    if lane is not None:
                        lane.box.close()
                        lane = None
            if lane is None:
                return
            try:
                lane.box.relay.pass_through()
                lane.box.relay.disarm()
                if shared:
                    check_consistent(lane.box, lane.op, lane.dep, expect=lane.greeting)  # type: ignore[arg-type]
                    pool.give(lane)
                else:
                    lane.destroy_all()
                    lane.box.close()
                lane = None
            except BaseException as exc:  # noqa: BLE001
                failures.append(_report(name, "end of lane", lane, exc))
        finally:
            if lane is not None:
                lane.box.close()

    t0 = time.monotonic()
    with ThreadPoolExecutor(n_lanes) as ex:
        for fut in [ex.submit(work, i, s) for i, s in enumerate(plan) if s]:
            fut.result()
    if VERBOSE:
        print(f"\n== {name}: {len(all_seeds)} seed(s) on {n_lanes} lane(s) in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    if failures:
        raise AssertionError(f"{len(failures)} of {len(all_seeds)} seed(s) of {name} failed "
                             f"(one alone: MUR_FAULTS_SEED=<offset> shifts every seed):\n\n" + "\n\n".join(failures))


def _report(name: str, seed: Any, lane: Lane | None, exc: BaseException) -> str:
    lines = [f"--- {name} seed {seed}: {type(exc).__name__}: {str(exc)[:3000]}"]
    if not isinstance(exc, AssertionError):
        lines.append("".join(traceback.format_exception(exc))[-2000:])
    if lane is not None:
        lines += [f"  note: {n}" for n in lane.notes[-5:]]
        lines.append("  commands:\n" + "\n".join("    " + ln for c in lane.op.log[-4:] for ln in c.splitlines()))
        lines.append(f"  relay: {lane.box.relay.describe(12)}")
    return "\n".join(lines)


# --- what a faulted command must have said, and what status must say after it --------------------

FAULTS = ("cut", "blackhole", "reset", "drop")  # the link faults; seeds cycle through them


def inject(relay: Relay, kind: str, rng: random.Random) -> Callable[[Relay], None]:
    """The relay action for a link fault: cut (FIN), reset (RST), drop (cut, then refused for a
    moment, then back: the undo must reconnect), blackhole (silent until the command has ended)."""
    back_after = rng.uniform(0.5, 2.5)

    def act(r: Relay) -> None:
        if kind == "cut":
            r.cut()
        elif kind == "reset":
            r.cut(rst=True)
        elif kind == "drop":
            r.cut(rst=True)
            r.refuse()
            threading.Timer(back_after, r.pass_through).start()
        elif kind == "blackhole":
            r.blackhole()
        else:
            raise ValueError(kind)
    act.__name__ = kind
    return act


def expect_failure(run: Run, rc: int, *, codes: tuple[str, ...] = ("E-DEPLOY-003",), bound: float | None = None,
                   allow_success: bool = False) -> bool:
    """The command failed the way a user can act on: exit 1 with `error[CODE]` (one of `codes`)
    and a hint line, no traceback, within `bound` seconds of the fault. True when it failed; with
    `allow_success`, a command that finished before the fault could bite may have succeeded."""
    text = run.stderr
    no_traceback(text)
    if rc == 0 and allow_success:
        return False
    assert rc == 1, f"exit {rc}, wanted 1:\n{_tail(text, 25)}"
    errors = re.findall(r"error\[([A-Z]+-[A-Z]+-\d+)\]", text)
    assert errors, f"no error[CODE] line:\n{_tail(text, 25)}"
    assert errors[-1] in codes, f"error[{errors[-1]}], wanted one of {codes}:\n{_tail(text, 25)}"
    if bound is not None and run.signalled_at is not None:
        took = run.ended_at - run.signalled_at
        assert took <= bound, f"it took {took:.1f}s after the fault to give up (bound {bound:.0f}s):\n{_tail(text, 25)}"
    return True


def last_step(run: Run) -> str:
    """The progress step that was running when the command ended (the last `· step` line)."""
    steps = [text[2:] for _, text in run.lines if text.startswith("· ")]
    return steps[-1] if steps else ""


def names_the_step(run: Run, words: list[str]) -> None:
    """The error line names the step the silent link stopped (E-DEPLOY-003 "naming the step")."""
    err = next((ln for _, ln in reversed(run.lines) if ln.startswith("error[")), "")
    assert any(w in err.lower() for w in words), f"the error does not name the step (one of {words}): {err}"


def check_truthful(box: Box, op: Operator, dep: str) -> Truth:
    """Right after a fault (link back): whatever state the deployment is in, status must not lie.
    `running` means record == current == what answers; any other state must be one of the issue's
    (incomplete, diverged, crash-looping, stopped) and then nothing may claim to be fine."""
    t = truth(box, op, dep)
    status = t.record.get("status")
    if status == "running":
        return check_consistent(box, op, dep)
    assert status in ("incomplete", "diverged", "crash-looping", "stopped", "failed"), \
        f"status {status!r} after a fault\n  {t.describe()}"
    assert t.status_rc != 0 or status == "incomplete", f"status {status!r} with exit 0\n  {t.describe()}"
    return t
