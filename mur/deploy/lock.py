"""One command at a time per deployment, enforced on the target itself.

The lock is an `flock` on `~/.murmur/locks/<dep_id>.lock` *held by a process on the target*: a
small POSIX sh script (`holder_script`) started over its own channel of the command's connection
(or as a local child in its own session). It takes the lock, writes who holds it beside it
(`<dep_id>.holder`: the target's clock, then operator host, user, pid, start time, command, a
random token), answers `@@locked`, and then lives exactly as long as the command: it reads one
heartbeat byte every MUR_DEPLOY_KEEPALIVE seconds and exits at end of input (the command ended,
was killed with -9, or its connection was reset) or after DEAD_AFTER + KEEPALIVE seconds of
silence (a blackholed link), but not before what that command sent has ended: a stop or restart
goes on on the target when its link dies (mur.deploy.init.supervisor.hold_run_dir), and the holder
waits for it (up to AFTER_WAIT_SECS), so no other command starts beside it. The kernel drops the
flock with the process: a dead holder never blocks anyone, and nothing is ever released by age.

A second command waits up to `--lock-wait` seconds (default 0: fail at once) and then fails with
E-DEPLOY-013 naming the holder. Commands that write shared files (the runtime, artifacts, compiled
components) also hold `shared.lock` in shared mode; a garbage collection of shared files takes it
exclusively and without waiting, so it never removes what a deploy in progress is about to use.

A lock is per target and per deployment, independent of any other: a fleet (several targets)
acquires one `TargetLock` per target in a fixed order (sorted by target label) and releases them
in reverse; a failure to get one releases those already held.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from mur.deploy.deadlines import Deadlines, current as current_deadlines
from mur.deploy.steps import Layout
from mur.deploy.targets.base import Held, Target
from mur.digits import digits_int, is_digits
from mur.errors import MurError
from mur.progress import QUIET, Reporter

SHARED = "shared"
AFTER_WAIT_SECS = 100  # the holder's wait for a stop its command left running (60 s stop + margin)


def locks_dir(home: str) -> str:
    return f"{home.rstrip('/')}/.murmur/locks"


# The descriptor the lock holder keeps the deployment's lock on (a status looks for it: held_here).
HOLDER_FD = 9


def holder_script(lock_dir: str, name: str, *, shared: bool, wait: float, release_after: float, holder: str,
                  after: str = "") -> str:
    """The remote half of the lock (POSIX sh + util-linux flock + coreutils: all in minbase)."""
    q = shlex.quote
    d, n = q(lock_dir), q(name)
    w = "0" if wait <= 0 else f"{wait:g}"
    same = 'stat -L -c %d:%i "$d/{0}" 2>/dev/null)" = "$(stat -L -c %d:%i /proc/$$/fd/{1})"'
    take_shared = (f"command exec 8>>\"$d/{SHARED}.lock\" || {{ sleep 0.1; continue; }}; "
                   "flock -s -w 60 8 || { echo \"@@error the host's shared lock stayed busy\"; exit 75; }; "
                   f"[ \"$({same.format(SHARED + '.lock', 8)} ] || {{ exec 8>&-; continue; }}; "
                   if shared else "")
    who = 'cat "$d/$n.holder" 2>/dev/null | head -c 2000'
    return (
        f"d={d}; n={n}; w={w}; i=0; "
        "while :; do i=$((i+1)); if [ $i -gt 50 ]; then echo \"@@error cannot open the lock files in $d\"; exit 70; fi; "
        "mkdir -p \"$d\" 2>/dev/null; chmod 700 \"$d\" 2>/dev/null; "
        f"{take_shared}"
        f"command exec {HOLDER_FD}>>\"$d/$n.lock\" || {{ exec 8>&-; sleep 0.1; continue; }}; "
        f"if ! flock -n {HOLDER_FD}; then "
        f"if [ \"$w\" = 0 ]; then printf '@@busy %s %s\\n' \"$(date +%s)\" \"$({who})\"; exit 75; fi; "
        f"printf '@@waiting %s %s\\n' \"$(date +%s)\" \"$({who})\"; "
        f"flock -w \"$w\" {HOLDER_FD} || {{ printf '@@busy %s %s\\n' \"$(date +%s)\" \"$({who})\"; exit 75; }}; fi; "
        # the file may have been removed (destroy) while we waited: hold the lock of the file that is there
        f"[ \"$({same.format('$n.lock', HOLDER_FD)} ] && break; "
        f"exec {HOLDER_FD}>&- 8>&-; w=0; done; "
        f"prev=$({who}); "
        f"printf '%s %s\\n' \"$(date +%s)\" {q(holder)} > \"$d/$n.holder.$$\" && mv -f \"$d/$n.holder.$$\" \"$d/$n.holder\"; "
        "printf '@@locked %s\\n' \"$prev\"; "
        f"while c=$(timeout {release_after:g} dd bs=1 count=1 2>/dev/null); do case \"$c\" in "
        ".) ;; "
        "u) flock -u 8 2>/dev/null; exec 8>&-; echo @@unshared;; "
        "r) rm -f \"$d/$n.lock\" \"$d/$n.holder\"; echo @@removed;; "
        "*) break;; esac; done; "
        # `after`: what the command sent may outlive it (a stop or restart whose link died goes on,
        # holding this directory: mur.deploy.init.supervisor.hold_run_dir): the lock stays held until it ends
        f"r={q(after)}; if [ -n \"$r\" ] && [ -d \"$r\" ]; then flock -w {AFTER_WAIT_SECS} \"$r\" true 2>/dev/null; fi; true"
    )


def probe_command(lock_path: str, holder_path: str) -> str:
    """`@@lock held <now> <holder line>` or `@@lock free`, without taking the lock (a status must
    never make a deploy fail).

    Two reads, since neither sees every holder: the kernel's table (/proc/locks, by device and
    inode) shows any user's lock, but in a PID namespace (a container) it hides a lock whose taker
    has exited, which is the case here (holder_script's `flock 9` is a child that returns); a
    holder's own descriptor (/proc/<pid>/fdinfo/9 lists the locks held through it) shows it there,
    for the processes this user may inspect."""
    q = shlex.quote
    lock = q(lock_path)
    return (f"if [ -e {lock} ]; then h=; d=$(stat -c %d {lock}); i=$(stat -c %i {lock}); "
            "k=$(printf '%02x:%02x:%s' $(( (d >> 8) & 0xfff )) $(( (d & 0xff) | ((d >> 12) & 0xfff00) )) \"$i\"); "
            "grep -q \" FLOCK .* $k \" /proc/locks 2>/dev/null && h=1; "
            f"if [ -z \"$h\" ]; then for f in /proc/[0-9]*/fd/{HOLDER_FD}; do [ \"$f\" -ef {lock} ] || continue; "
            f"p=${{f%/fd/{HOLDER_FD}}}; grep -q '^lock:' \"$p/fdinfo/{HOLDER_FD}\" 2>/dev/null && {{ h=1; break; }}; done; fi; "
            "if [ -n \"$h\" ]; then "
            f"printf '@@lock held %s %s\\n' \"$(date +%s)\" \"$(head -c 2000 {q(holder_path)} 2>/dev/null)\"; "
            "else echo '@@lock free'; fi; fi")


def held_here(lock_path: str) -> bool:
    """Whether some process on this machine holds an flock on `lock_path` (probe_command, run here)."""
    try:
        out = subprocess.run(["sh", "-c", probe_command(lock_path, "/dev/null")], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.startswith("@@lock held ")


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a lock, as its holder file says."""

    since: int  # the target's clock when it was taken (compared with the target's clock only)
    host: str = "?"
    user: str = "?"
    pid: int = 0
    command: str = "?"
    started: str = ""
    token: str = ""

    @classmethod
    def parse(cls, text: str) -> "Holder | None":
        since, _, rest = text.strip().partition(" ")
        if not is_digits(since):
            return None
        try:
            d = json.loads(rest) if rest.strip() else {}
        except ValueError:
            d = {}
        if not isinstance(d, dict):
            d = {}
        return cls(int(since), str(d.get("host", "?")), str(d.get("user", "?")), int(d.get("pid") or 0),
                   str(d.get("command", "?")), str(d.get("started", "")), str(d.get("token", "")))

    def describe(self, now: int | None = None) -> str:
        held = f", for {max(0, now - self.since)}s" if now else ""
        return f"`{self.command}` (pid {self.pid} on {self.host}, user {self.user}, started {self.started}{held})"

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "user": self.user, "pid": self.pid, "command": self.command,
                "started": self.started}


def me(command: str) -> dict[str, Any]:
    """This process as a lock holder (never the command line: it may carry --env values)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"host": socket.gethostname(), "user": user, "pid": os.getpid(), "command": command,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "token": secrets.token_hex(8)}


class TargetLock:
    """A lock held on a target for the life of one command (see the module docstring)."""

    def __init__(self, target: Target, name: str, *, command: str, wait: float = 0.0, shared: bool = False,
                 reporter: Reporter = QUIET, deadlines: Deadlines | None = None, what: str = "",
                 on_wait: Callable[[Holder | None], None] | None = None):
        self.t, self.name, self.command, self.wait, self.shared = target, name, command, max(0.0, wait), shared
        self.r, self.dl = reporter, deadlines or current_deadlines()
        self.what = what or f"deployment {name}"
        self.on_wait = on_wait
        self.me = me(command)
        self.held: Held | None = None
        self.previous: Holder | None = None  # who held it before this command took it
        self._stop = threading.Event()

    @property
    def token(self) -> str:
        return str(self.me["token"])

    def acquire(self) -> "TargetLock":
        script = holder_script(locks_dir(self.t.home), self.name, shared=self.shared, wait=self.wait,
                               release_after=self.dl.lock_release, holder=json.dumps(self.me, sort_keys=True),
                               after=Layout(self.t.home, self.name).run_dir)
        held = self.t.hold(script)
        limit = time.monotonic() + self.wait + 70 + self.dl.dead_after
        while True:
            line = held.readline(max(0.1, limit - time.monotonic()))
            if line is None or line == "":
                held.close()
                raise MurError("E-DEPLOY-003", f"{self.t.label}: taking the lock of {self.what} failed: "
                               + ("no answer" if line is None else "the lock holder ended"),
                               "check that util-linux flock exists on the target")
            tag, _, rest = line.strip().partition(" ")
            if tag == "@@waiting":
                h, now = _holder_and_now(rest)
                self.r.note(f"{self.what} is locked by {h.describe(now) if h else 'another command'}: "
                            f"waiting up to {self.wait:g}s")
                if self.on_wait is not None:
                    self.on_wait(h)
            elif tag == "@@busy":
                held.close()
                h, now = _holder_and_now(rest)
                raise busy_error(self.what, self.t.label, h, now, self.wait)
            elif tag == "@@error":
                held.close()
                raise MurError("E-DEPLOY-003", f"{self.t.label}: {rest}")
            elif tag == "@@locked":
                self.previous = Holder.parse(rest) if rest.strip() else None
                break
        self.held = held
        threading.Thread(target=self._beat, daemon=True, name="mur-lock-heartbeat").start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.dl.keepalive):
            held = self.held
            if held is None or not held.send(b"."):
                return

    @property
    def lost(self) -> bool:
        """The holder is gone (its link died): another command may hold the lock now."""
        return self.held is None or self.held.closed

    def _command(self, byte: bytes, answer: str) -> bool:
        if self.held is None or not self.held.send(byte):
            return False
        line = self.held.readline(5.0)
        return bool(line) and line.strip() == answer

    def drop_shared(self) -> bool:
        """Stop holding the host's shared lock (so this command may collect shared files itself)."""
        return self._command(b"u", "@@unshared") if self.shared else True

    def remove_files(self) -> bool:
        """Remove the lock and holder files while still holding the lock (destroy); a waiter then
        finds the file gone and takes a fresh one."""
        return self._command(b"r", "@@removed")

    def release(self) -> None:
        self._stop.set()
        held, self.held = self.held, None
        if held is not None:
            held.send(b"q")
            held.close()

    def __enter__(self) -> "TargetLock":
        return self.acquire() if self.held is None else self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder_and_now(rest: str) -> tuple[Holder | None, int | None]:
    now, _, text = rest.partition(" ")
    return Holder.parse(text), digits_int(now)


def busy_error(what: str, where: str, holder: Holder | None, now: int | None, waited: float) -> MurError:
    who = holder.describe(now) if holder else "another command (its holder file is unreadable)"
    waited_text = f" after waiting {waited:g}s" if waited else ""
    return MurError("E-DEPLOY-013", f"{what} is locked on {where} by {who}{waited_text}",
                    "one command at a time per deployment: the lock is released when that command ends (or its "
                    "process or link dies); wait for it with --lock-wait SECONDS")
