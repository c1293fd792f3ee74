"""What the deploy fault suite checks after each fault: what is true on the target (Truth), that
exactly one consistent release serves (check_consistent), that status does not lie
(check_truthful), that nothing is left after destroy (check_nothing_left), and how a faulted
command must have failed (expect_failure); and the link faults themselves (inject).

What serves is asked of the service itself: every release of a scenario is deployed with its own
greeting (`--env HELLO_GREETING=gN`), and a real A2A task answered "gN, probe!" says which one runs.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fault_target import Box, Operator, Run, _tail, finding, quiet_port
from mur.testing.relay import Relay

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


# One round trip for everything the checks read of a deployment on the target (docker exec, not
# through the relay): where `current` points, each release (complete? which greeting?), and the
# command lines of its processes.
_READ = r"""
root="$1"
echo "current $(readlink "$root/current" 2>/dev/null)"
for r in "$root"/releases/*; do
  [ -d "$r" ] || continue
  n=${r##*/}; c=0; [ -s "$r/release.json" ] && c=1
  g=$(sed -n 's/^HELLO_GREETING="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$r/env" 2>/dev/null | head -1)
  echo "release $n $c $g"
done
for p in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
  case "$c" in *"$2"*) echo "proc $c";; esac
done
"""


def read_target(box: Box, dep: str) -> tuple[int | None, dict[int, dict], list[str]]:
    """(release `current` names, {n: {"complete", "greeting"}}, the deployment's process command lines)."""
    res = box.vm.container.exec_run(["/bin/sh", "-c", _READ, "sh", box.dep_root(dep), dep])
    current, releases, procs = None, {}, []
    for line in (res.output or b"").decode("utf-8", "replace").splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "current":
            tail = rest.strip().rsplit("/", 1)[-1]
            current = int(tail) if tail.isdigit() else None
        elif kind == "release":
            n, complete, *greeting = rest.split(" ", 2)
            if n.isdigit():
                releases[int(n)] = {"complete": complete == "1", "greeting": (greeting[0].strip() or None) if greeting else None}
        elif kind == "proc" and "/proc/" not in rest:
            procs.append(rest)
    return current, releases, procs


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
        with target.forward(int(port), quiet_port()) as fw:
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
    current, releases, procs = read_target(box, dep)
    serving, card = ask_service(box, op, rec) if rec.get("service_port") else (None, None)
    sup = [p for p in procs if "supervise run" in p]
    svc = [p for p in procs if " run --manifest" in p and "supervise" not in p]
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
    # keep 5; a deploy whose link died after its start but before its prune leaves a 6th (complete,
    # and what serves) for the next deploy to prune: seen in a CI rehearsal, a blackhole 1 s into the start
    if len(t.releases) > 6:
        why.append(f"{len(t.releases)} releases kept (at most 5, and one a cut deploy has not pruned yet)")
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
                  f"-o -path '*/staging/*' \\) 2>/dev/null")
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


# --- what a faulted command must have said, and what status must say after it --------------------

# The link faults; seeds cycle through them, so CI's two seeds per scenario get the two hardest:
# a drop (the undo must reconnect) and a blackhole (deadlines); soak adds the plain cut and reset.
FAULTS = ("drop", "blackhole", "cut", "reset")


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
    # mur's own error line is the first; a remote log quoted after it may hold the service's own
    errors = re.findall(r"^error\[([A-Z]+-[A-Z]+-\d+)\]", text, re.M)
    assert errors, f"no error[CODE] line:\n{_tail(text, 25)}"
    assert errors[0] in codes, f"error[{errors[0]}], wanted one of {codes}:\n{_tail(text, 25)}"
    if not re.search(r"^  hint: ", text, re.M):
        finding(f"error[{errors[0]}] without a hint line: "
                + next(ln for ln in text.splitlines() if ln.startswith(f"error[{errors[0]}]"))[:300])
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
    deadline = time.monotonic() + 30
    while t.record.get("status") == "starting" and time.monotonic() < deadline:  # a restart in progress
        time.sleep(2)
        t = truth(box, op, dep)
    status = t.record.get("status")
    if status == "running":
        return check_consistent(box, op, dep)
    assert status in ("incomplete", "diverged", "crash-looping", "stopped", "failed"), \
        f"status {status!r} after a fault\n  {t.describe()}"
    assert t.status_rc != 0 or status == "incomplete", f"status {status!r} with exit 0\n  {t.describe()}"
    return t
