"""Run ShellSandbox sessions as an unprivileged uid (the tools then share mur's uid).

``run_sessions(user, spec)`` starts this checkout's python as ``user`` (h12a's
``hostile.UnprivilegedUser``: its own HOME, v1 cgroups delegated to it) with the driver below,
which opens one ShellSandbox per entry of ``spec["sessions"]`` (all open at once, so one session
can attack another), runs the calls and prints one JSON object: each session's policy summary and
call results. ``spec["background"]`` names calls started in a thread first (victims that keep
running while later calls attack them); ``{victimK}`` in a later call stands for a host pid of
session K's tools and ``{driver}`` for the driver's own (mur's) pid. After the calls, each
session's surviving processes are listed with their parent, nice value and CPU affinity. A
session with ``"no_namespaces": true`` runs as on a host that refuses unshare() (a container's
default seccomp profile): no namespaces at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from hostile import ROOT, UnprivilegedUser, join_cgroups, python_for_others  # type: ignore[import-not-found]

DRIVER = r'''
import json, os, sys, threading, time
from pathlib import Path
from mur.manifest.capsule import Capabilities
from mur.manifest.network import parse_allow_list
from mur.sandbox.shell import ShellSandbox

spec = json.loads(sys.stdin.read())
names = spec.get("names", {})
out = {"driver_pid": os.getpid(), "sessions": []}
boxes = []
try:
    for i, s in enumerate(spec["sessions"]):
        caps = Capabilities.model_validate(s["caps"], strict=False)
        wd = Path(spec["base"]) / s.get("workdir", f"session{i}")
        probe = None
        if s.get("no_namespaces"):  # as in a container whose seccomp profile refuses unshare()
            from dataclasses import replace
            from mur.sandbox.probe import probe_host
            probe = replace(probe_host(), netns=False, userns=False)
        sb = ShellSandbox(caps, wd, f"ses_asuser{os.getpid()}_{i}", parse_allow_list(s.get("network_allow", [])),
                          probe=probe, host_env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                          resolve=lambda h: names.get(h, []))
        warnings = sb.start()
        boxes.append(sb)
        out["sessions"].append({"workdir": str(sb.workdir), "warnings": warnings, "network": sb.policy.network.mode,
                                "processes": sb.policy.processes, "namespaces": list(sb.policy.namespaces),
                                "aggregate": sb.policy.aggregate, "rlimits": dict(sb.policy.rlimits),
                                "view": sb.policy.host_view, "disk": sb.policy.disk.mechanism,
                                "results": []})
    threads = []
    for i, call in spec.get("background", []):
        t = threading.Thread(target=boxes[i].run, args=(call["binary"],),
                             kwargs={"command": call.get("command"), "args": call.get("args"), "timeout": 60},
                             daemon=True)
        t.start()
        threads.append(t)
    def victim(k):  # a host pid of session k's tools (the newest one)
        until = time.monotonic() + 20
        while not boxes[k].tool_pids() and time.monotonic() < until:
            time.sleep(0.05)
        time.sleep(0.3)
        return max(boxes[k].tool_pids())
    def fill(text):
        if text is None:
            return None
        for k in range(len(boxes)):
            if "{victim%d}" % k in text:
                text = text.replace("{victim%d}" % k, str(victim(k)))
        return text.replace("{driver}", str(os.getpid()))
    for i, call in spec.get("calls", []):
        args = [fill(a) for a in call["args"]] if call.get("args") is not None else None
        r = boxes[i].run(call["binary"], command=fill(call.get("command")), args=args, timeout=60)
        out["sessions"][i]["results"].append({"exit_code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                                              "resource_limit": r.resource_limit})
    for k, sb in enumerate(boxes):  # the ceiling as the kernel (or the guard) saw it
        time.sleep(0.3 if sb.disk is None else 0)  # the watcher's next reading
        exceeded = sb.workdir_exceeded()
        out["sessions"][k]["exceeded"] = exceeded.render() if exceeded is not None else None
        out["sessions"][k]["disk_used"] = sb.disk.usage().used if sb.disk is not None else None
    for k, sb in enumerate(boxes):  # what the other sessions' calls left of this session's processes
        state = []
        for pid in sorted(sb.tool_pids()):
            try:
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                state.append({"pid": pid, "ppid": int(fields[1]), "nice": int(fields[16]),
                              "affinity": sorted(os.sched_getaffinity(pid))})
            except OSError:
                pass
        out["sessions"][k]["processes_after"] = state
        out["sessions"][k]["spawner_pid"] = sb._spawner.pid if sb._spawner is not None else None
finally:
    for sb in boxes:
        sb.close()
print(json.dumps(out))
'''


def _python(user: UnprivilegedUser) -> tuple[str, str]:
    """(interpreter, bootstrap prefix) that give ``user`` this checkout and its dependencies."""
    prefix = python_for_others()
    assert prefix is not None
    site = sysconfig.get_paths()["purelib"]
    boot = f"import site, sys; site.addsitedir({site!r}); sys.path.insert(0, {str(ROOT)!r})\n"
    return prefix[0], boot


def _env(user: UnprivilegedUser) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(user.home), "LANG": "C.UTF-8"}
    if os.environ.get("PYTHONPATH"):  # the VM suite's copy of the packages
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def run_sessions(user: UnprivilegedUser, spec: dict[str, Any], timeout: float = 180,
                 prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the driver as ``user`` (in ``user.cgroups``; ``prefix``: an argv run first, as root, that
    execs the rest); returns its JSON (raises with its stderr when it fails)."""
    base = Path(spec["base"]) if "base" in spec else Path(user.home) / f"sessions-{os.urandom(4).hex()}"
    if not base.exists():  # a given base: a rerun on the workdirs an earlier driver left
        base.mkdir()
        user.chown(base)
    python, boot = _python(user)

    argv = [*prefix, "setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--",
            python, "-c", boot + DRIVER]
    proc = subprocess.run(argv, input=json.dumps(dict(spec, base=str(base))), capture_output=True, text=True,
                          timeout=timeout, cwd=str(base), preexec_fn=lambda: join_cgroups(user),
                          env=_env(user))
    if proc.returncode != 0:
        raise AssertionError(f"driver failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bare_as(user: UnprivilegedUser, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """The control: the same action as a plain process of ``user`` (no sandbox)."""
    return subprocess.run(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--", *argv],
                          capture_output=True, text=True, timeout=timeout, env=_env(user))
