"""What is true on a host: which release `current` names, which releases are complete, what an
interrupted command left, who holds the lock, and which release the process answering on the
service port runs. The state of a deployment is derived from that (`derive`), never from the record.

The serving release is read from the process itself: the listening socket of the service port
(/proc/net/tcp) leads to the process that holds it, and that process's working directory is the
release it was started from (the supervisor and the systemd unit both start `mur run` in the
release's own directory). So a service still running an old release after `current` was switched
is seen as what it is, whatever the record or `current` say.

States (docs/deploy.md, "States"):

    running        the release `current` names serves, answers with the token, record agrees
    starting       its process is up and has not answered yet (no crash so far)
    crash-looping  it keeps exiting and being restarted (restart count, last exit status)
    stopped        nothing serves (stopped by request, or it exited and was not restarted)
    diverged       `current` and the serving release disagree (or something else holds the port)
    incomplete     an interrupted command left something (what is listed); the next deploy repairs it
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from mur.deploy.lock import Holder, probe_command
from mur.deploy.steps import DEPLOYMENT_TMP_GLOBS, Layout, ServiceState
from mur.digits import digits_int, is_digits

STATES = ("running", "starting", "crash-looping", "stopped", "diverged", "incomplete")


def serving_command(port: int) -> str:
    """`@@serving <pid> <cwd>` of the process listening on `port` (`? ?` when it cannot be seen)."""
    return (
        f"ph=$(printf '%04X' {int(port)}); "
        "ino=$(awk -v s=\":$ph\" '$4 == \"0A\" && substr($2, length($2) - 4) == s { print $10; exit }' "
        "/proc/net/tcp /proc/net/tcp6 2>/dev/null); "
        "if [ -n \"$ino\" ] && [ \"$ino\" != 0 ]; then "
        "f=$(find /proc/[0-9]*/fd -lname \"socket:\\[$ino\\]\" 2>/dev/null | head -n 1); "
        "pid=${f#/proc/}; pid=${pid%%/*}; "
        "if [ -n \"$f\" ]; then printf '@@serving %s %s\\n' \"$pid\" \"$(readlink /proc/$pid/cwd 2>/dev/null)\"; "
        "else echo '@@serving ? ?'; fi; fi"
    )


def observe_command(lay: Layout, port: int | None) -> str:
    """One round trip: `current`, releases (complete with their release.json, or partial), the
    temporary names of cut replacements, staging leftovers, the lock (free, or held and by whom),
    and the serving process."""
    q = shlex.quote
    lock, holder = f"{lay.locks}/{lay.dep_id}.lock", f"{lay.locks}/{lay.dep_id}.holder"
    parts = [
        f"if cd {q(lay.root)} 2>/dev/null; then "
        "printf '@@current %s\\n' \"$(readlink current 2>/dev/null)\"; "
        "printf '@@previous %s\\n' \"$(readlink previous 2>/dev/null)\"; "
        "for x in releases/*; do [ -d \"$x\" ] || continue; n=${x#releases/}; "
        "if [ -f \"$x/release.json\" ]; then printf '@@release %s %s\\n' \"$n\" \"$(tr -d '\\n' < \"$x/release.json\")\"; "
        "else printf '@@partial %s\\n' \"$n\"; fi; done; "
        f"for f in {' '.join(DEPLOYMENT_TMP_GLOBS)}; do "
        "if [ -e \"$f\" ] || [ -L \"$f\" ]; then printf '@@tmp %s\\n' \"$f\"; fi; done; else echo @@absent; fi",
        f"if [ -d {q(lay.staging)} ]; then n=0; for x in {q(lay.staging)}/*; do [ -e \"$x\" ] || continue; "
        "n=1; printf '@@staging %s\\n' \"${x##*/}\"; done; [ $n = 1 ] || echo '@@staging .'; fi",
        probe_command(lock, holder),
    ]
    if port:
        parts.append(serving_command(port))
    return "; ".join(parts) + "; true"


@dataclass
class HostView:
    """The parsed answer of observe_command."""

    exists: bool = False
    current: int | None = None
    current_raw: str = ""
    previous: int | None = None  # what served before `current` was switched (the `previous` link)
    releases: dict[int, dict[str, Any]] = field(default_factory=dict)  # complete: their release.json
    partial: list[int] = field(default_factory=list)
    staging: list[str] = field(default_factory=list)
    tmp: list[str] = field(default_factory=list)  # temporary names of cut replacements (`current.mur-tmp`)
    lock_held: bool = False
    holder: Holder | None = None
    holder_now: int | None = None
    listener: bool = False  # something listens on the service port
    serving_pid: int | None = None
    serving_cwd: str = ""
    serving: int | None = None  # the release the listening process runs (None: none, or not a release)

    @property
    def numbers(self) -> list[int]:
        return sorted(set(self.releases) | set(self.partial))

    def meta(self, n: int | None) -> dict[str, Any]:
        return self.releases.get(n, {}) if n is not None else {}

    def older_complete(self, than: int | None) -> list[int]:
        """Complete releases older than `than` (every complete one when None), newest first."""
        return sorted((n for n in self.releases if than is None or n < than), reverse=True)

    def rollback_target(self) -> int | None:
        """What served before the release `current` names (the `previous` link), when it is still a
        complete release; else the newest complete release older than it."""
        if self.previous is not None and self.previous in self.releases and self.previous != self.current:
            return self.previous
        older = self.older_complete(self.current)
        return older[0] if older else None


def release_of(path: str, lay: Layout) -> int | None:
    """The release number a path lies in (`.../releases/<n>[/...]`), else None."""
    prefix = lay.releases.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    head = path[len(prefix):].split("/", 1)[0].split(" ", 1)[0]
    return digits_int(head)


def parse_observation(out: str, lay: Layout) -> HostView:
    v = HostView()
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "@@current":
            v.exists = True
            v.current_raw = rest.strip()
            name = v.current_raw.rstrip("/").rsplit("/", 1)[-1]
            v.current = digits_int(name)
        elif tag == "@@previous":
            name = rest.strip().rstrip("/").rsplit("/", 1)[-1]
            v.previous = digits_int(name)
        elif tag == "@@release":
            n, _, body = rest.partition(" ")
            try:
                meta = json.loads(body)
            except ValueError:
                meta = None
            if is_digits(n):
                if isinstance(meta, dict):
                    v.releases[int(n)] = meta
                else:  # an unreadable release.json is not a complete release
                    v.partial.append(int(n))
        elif tag == "@@partial" and is_digits(rest.strip()):
            v.partial.append(int(rest.strip()))
        elif tag == "@@tmp" and rest.strip():
            v.tmp.append(rest.strip())
        elif tag == "@@staging" and rest.strip():
            v.staging.append(rest.strip())
        elif tag == "@@lock":
            kind, _, more = rest.partition(" ")
            if kind == "held":
                v.lock_held = True
                now, _, text = more.partition(" ")
                v.holder_now = digits_int(now)
                v.holder = Holder.parse(text)
        elif tag == "@@serving":
            v.listener = True
            pid, _, cwd = rest.partition(" ")
            v.serving_pid = digits_int(pid)
            v.serving_cwd = cwd.strip() if cwd.strip() != "?" else ""
            v.serving = release_of(v.serving_cwd, lay)
    return v


@dataclass
class Truth:
    """A deployment's state as derived from what the target shows (see the module docstring)."""

    state: str
    reason: str
    current: int | None = None
    serving: int | None = None
    record: int | None = None
    answers: bool = False
    restarts: int = 0
    last_exit: int | None = None
    left: list[str] = field(default_factory=list)
    locked_by: dict[str, Any] | None = None
    consistent: bool = False  # current == serving, answering, nothing left over: the record follows it

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "current": self.current, "serving": self.serving,
                "record": self.record, "answers": self.answers, "restarts": self.restarts,
                "last_exit": self.last_exit, "left": list(self.left), "locked_by": self.locked_by}


def leftovers(v: HostView) -> list[str]:
    return ([f"release {n} without release.json" for n in sorted(v.partial)]
            + sorted(v.tmp)
            + [f"staging/{s}" if s != "." else "an empty staging directory" for s in sorted(v.staging)])


def derive(v: HostView, svc: ServiceState, answers: bool, record: int | None, pending: dict[str, Any] | None,
           own_token: str = "") -> Truth:
    """The state, from the observation, the init system's report, the health check and the record."""
    other = v.lock_held and (v.holder is None or v.holder.token != own_token)
    locked_by = ({**v.holder.to_dict(), "for_seconds": max(0, (v.holder_now or v.holder.since) - v.holder.since)}
                 if other and v.holder else ({"command": "?"} if other else None))
    left = [] if other else leftovers(v)
    base = dict(current=v.current, serving=v.serving, record=record, answers=answers, restarts=svc.restarts,
                last_exit=svc.last_exit, left=left, locked_by=locked_by)
    # a deploy cut off (its undo could not reach the target, or kill -9) after its release was
    # committed: that release is left beside the serving one until the next deploy switches to it
    # or prunes it, so the record keeps saying what is left instead of following the target
    stray = (pending or {}).get("release") if (pending or {}).get("command") in (None, "deploy") else None
    stray = stray if isinstance(stray, int) and stray in v.releases and stray != v.current else None
    consistent = (not left and stray is None and v.current is not None and v.serving == v.current and answers
                  and svc.running and not svc.looping)
    if other:
        who = locked_by.get("command", "?") if locked_by else "?"
        note = f"; {who} is under way" if who != "?" else "; another command is under way"
    else:
        note = ""
    also = f"; an interrupted command also left {', '.join(left)}" if left else ""
    if v.serving is not None and v.current is not None and v.serving != v.current:
        return Truth("diverged", f"release {v.serving} serves while current names release {v.current}"
                     f"{'' if record is None else f' and the record release {record}'}{also}{note}: the next "
                     "deploy repairs it", **base)
    if (pending or left) and not other and not consistent:
        what = f"`mur deploy {pending['command']}`" if pending and pending.get("command") not in (None, "deploy") else \
            "deploy"
        if left:
            reason = f"an interrupted command left {', '.join(left)}: the next deploy (or `mur deploy gc`) removes it"
        else:
            done = pending.get("left") if pending else None
            reason = f"a {what} was interrupted" + (f" (left: {'; '.join(done)})" if done else
                                                    f" (left: release {stray}, committed and not serving)" if stray else "")
            reason += ": deploy again to repair it, or destroy it"
        return Truth("incomplete", reason, **base)
    if v.listener and v.serving is None and v.serving_cwd and v.current is not None:
        return Truth("diverged", f"the service port is held by a process outside the releases "
                     f"(pid {v.serving_pid}, in {v.serving_cwd}){note}", **base)
    if v.serving is not None and not svc.running:
        return Truth("diverged", f"release {v.serving} serves from a process the init system does not run "
                     f"(pid {v.serving_pid}){note}", **base)
    if v.exists and v.releases and (v.current is None or v.current not in v.releases):
        return Truth("diverged", f"current names no complete release ({v.current_raw or 'missing'}){note}", **base)
    if svc.looping or (svc.running and not svc.ready and svc.restarts > 0 and not answers):
        return Truth("crash-looping", f"the service keeps exiting: {svc.restarts} restarts, last exit status "
                     f"{svc.last_exit if svc.last_exit is not None else '?'}{note}", **base)
    if svc.running and answers:
        return Truth("running", f"release {v.current} serves and answers{note}", consistent=consistent, **base)
    if svc.running:
        return Truth("starting", f"the service is up and has not answered yet{note}", **base)
    why = f"it exited with status {svc.last_exit}" if svc.exited and svc.last_exit not in (None, 0) else "not running"
    return Truth("stopped", f"nothing serves ({why}){note}", **base)
