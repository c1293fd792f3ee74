"""Idle capsules on one machine: memory per capsule and the time for N started at once to all answer.

    python bench/density.py [-n 1 10 40] [--manifest examples/hello] [--json]

For each N, N `mur run` processes of the same capsule start at once, each as a deployed service runs
it (`--lifecycle-task-acceptance queue --lifecycle-after-task sleep`, MURMUR_A2A_TIMEOUT_SECS=0,
`--json`, an OS-assigned port), sharing one warm compile cache (filled before the first round). The
clock runs from the first spawn until every capsule has answered `GET /.well-known/agent-card.json`
(as deploy's health check asks); a capsule that exits before answering is `lost`. Then, idle:

* PSS per capsule (`/proc/<pid>/smaps_rollup`: shared pages divided among the processes mapping
  them), and its anonymous part, summed over every process of the capsule (the `mur run`, the
  capsule it forked through the host, and whatever runs below either) plus, for `host`, a share of
  the host and its pre-forked spare;
* the drop in the machine's MemAvailable from before the first spawn;
* CPU seconds each launch used (utime + stime);
* then each capsule gets one task (a blocking ``message/send``), and PSS per capsule is measured
  again once it is idle again (`after a task`: IDLE_LET_GO_SECS later, when it has given back what
  it can load again): what a capsule that has served keeps (wasmtime, its engine).

Two ways, each round: `host` (the default for a service's run, MUR_CAPSULE_HOST unset: the capsule
host, mur.caphost, forks each capsule from a process that imported the runtime once; it is started by
the round's first capsule, and its start is in the round's time) and `in-process`
(MUR_CAPSULE_HOST=off: every `mur run` imports and runs the runtime itself, as deployed services
do). For `host` a capsule's figures are its client's (the `mur run` the service manager
watches) plus the forked capsule's plus its share of the host's. `--baseline OTHER_PYTHON` adds a
`before` round per N: that interpreter's mur (e.g. the previous version's venv), in-process.

Beside them, the floor: a bare interpreter (`python -c` sleeping) of the same Python, measured the
same way, and upstream's published figures (reference, not measured here: 43.79 MB PSS per capsule,
40 capsules to first request in 3.9 s on 8 CPUs). The machine's load average is printed with each
round: the machine is shared, so compare figures of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from mur.a2a.lifecycle import IDLE_LET_GO_SECS
from mur.testing.caphosts import host_pids

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = "upstream (published, 8 CPUs): 43.79 MB PSS per capsule; 40 capsules to first request in 3.9 s"


def mur_command(python: str = sys.executable) -> list[str]:
    script = Path(python).parent / "mur"  # the console script a user (and deploy) runs
    return [str(script)] if script.is_file() else [python, "-m", "mur"]


def rollup(pid: int) -> dict[str, int]:
    """smaps_rollup of `pid` in kB (Pss, Pss_Anon, Private_Dirty, ...)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:  # gone since it was listed (a short-lived child): it holds nothing now
        return {}
    return out


def tree(pid: int, stop: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """`pid` and every process below it but those in `stop` and theirs (a capsule's own children
    count: a session disk's holder, a shell tool, a background compile)."""
    found, todo = [], [pid]
    while todo:
        cur = todo.pop()
        if cur in stop:
            continue
        found.append(cur)
        try:
            for task in os.listdir(f"/proc/{cur}/task"):
                todo += [int(c) for c in Path(f"/proc/{cur}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mem_available_kb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{url}/.well-known/agent-card.json", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def one_task(url: str) -> None:
    """A blocking message/send; its answer is read, whatever it is."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "message": {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hello"}]},
        "configuration": {"blocking": True}}}).encode()
    request = urllib.request.Request(f"http://{url}/", data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            resp.read()
    except OSError:
        pass


MODES = ("in-process", "host")
BEFORE = "before"  # --baseline: another install's mur, in-process


def host_pid(home: Path) -> int | None:
    return next(iter(host_pids(home)), None)


class Round:
    """N capsules started at once, until all answer (or die)."""

    def __init__(self, n: int, manifest: Path, env: dict[str, str], work: Path, mode: str, mur: list[str]):
        self.n, self.manifest, self.work, self.mode, self.mur = n, manifest, work, mode, mur
        # `host` is what a service's `mur run` does by default (MUR_CAPSULE_HOST unset); in-process is `off`
        self.env = {k: v for k, v in env.items() if k != "MUR_CAPSULE_HOST"}
        if mode != "host":
            self.env["MUR_CAPSULE_HOST"] = "off"
        self.procs: list[subprocess.Popen] = []
        self.capsules: dict[int, int] = {}  # index -> the capsule's pid (the client's own in-process)

    def start(self, timeout: float) -> dict:
        before = mem_available_kb()
        argv = self.mur + ["run", "-m", str(self.manifest), "--json", "--lifecycle-task-acceptance", "queue",
                                "--lifecycle-after-task", "sleep"]
        began = time.monotonic()
        for i in range(self.n):
            self.procs.append(subprocess.Popen(argv + ["--workdir", str(self.work / f"w{i}")], env=self.env,
                                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        urls: dict[int, str] = {}
        up: set[int] = set()
        lost: set[int] = set()
        deadline = began + timeout
        while len(up) + len(lost) < self.n and time.monotonic() < deadline:
            for i, proc in enumerate(self.procs):
                if i in up or i in lost:
                    continue
                if proc.poll() is not None:
                    lost.add(i)
                    continue
                if i not in urls:
                    line = proc.stdout.readline()  # the startup line: deploy's contract
                    if not line:
                        continue
                    started = json.loads(line)
                    urls[i], self.capsules[i] = started["url"], started["pid"]
                if answers(urls[i]):
                    up.add(i)
            time.sleep(0.01)
        took = time.monotonic() - began
        time.sleep(2.0)  # settle: idle, as a deployed capsule waits for its first task
        alive = [i for i, p in enumerate(self.procs) if i in up and p.poll() is None]
        idle = self.measure(alive)
        drop = round((before - mem_available_kb()) / 1024, 1)
        for i in alive:  # then one task each: what a capsule that has served keeps, once idle again
            one_task(urls[i])
        time.sleep(IDLE_LET_GO_SECS + 2.0)
        served = self.measure([i for i in alive if self.procs[i].poll() is None])
        idle.pop("pids")
        return {
            "n": self.n, "mode": self.mode, "all_answering_s": round(took, 3), "answering": len(up),
            "lost": self.n - len(up), **idle,
            "pss_after_task_mb": served["pss_mb"], "anon_after_task_mb": served["anon_mb"],
            "mem_available_drop_mb": drop,
            "load": [round(x, 2) for x in os.getloadavg()],
        }

    def measure(self, alive: list[int]) -> dict:
        """PSS and its anonymous part per capsule, over every process of the ``alive`` capsules."""
        tops = [self.procs[i].pid for i in alive] + [self.capsules[i] for i in alive if self.capsules[i] != self.procs[i].pid]
        host = host_pid(Path(self.env["HOME"])) if self.mode == "host" else None
        shared = set(tree(host)) if host is not None else set()  # the host, its spare, the capsules it forked
        # the host is the child of the client that started it: counted once, as the host
        pids = sorted({pid for top in tops for pid in tree(top, {host} if host is not None else set())} | shared)
        roll = [rollup(pid) for pid in pids]
        count = max(1, len(alive))
        return {
            "pss_mb": round(sum(r.get("Pss", 0) for r in roll) / count / 1024, 2) if roll else None,
            "anon_mb": round(sum(r.get("Pss_Anon", 0) for r in roll) / count / 1024, 2) if roll else None,
            "cpu_s_per_launch": round(sum(cpu_seconds(p) for p in pids) / count, 3) if pids else None,
            "pids": pids,
        }

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        host = host_pid(Path(self.env["HOME"])) if self.mode == "host" else None
        if host is not None:  # the next round starts its own, and nothing is left running
            os.kill(host, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and host_pid(Path(self.env["HOME"])) is not None:
                time.sleep(0.05)


def floor_process(env: dict[str, str]) -> dict:
    """A bare interpreter, idle: what any Python process costs."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
    try:
        time.sleep(1.0)
        r = rollup(proc.pid)
        return {"pss_mb": round(r["Pss"] / 1024, 2), "anon_mb": round(r.get("Pss_Anon", 0) / 1024, 2)}
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, nargs="+", default=[1, 10, 40], help="capsules per round (default 1 10 40)")
    parser.add_argument("--manifest", type=Path, default=ROOT / "examples" / "hello", help="capsule (default examples/hello)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a round may take to answer")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="in-process, host (default both)")
    parser.add_argument("--baseline", help="another interpreter whose mur runs the same rounds in-process (before)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mur-density-") as tmp:
        tmp_path = Path(tmp)
        capsule = tmp_path / "capsule"
        shutil.copytree(args.manifest, capsule, ignore=shutil.ignore_patterns("workdir", ".murmur", "__pycache__"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("MURMUR_")}
        env.update({"HOME": str(tmp_path / "home"), "MURMUR_A2A_TIMEOUT_SECS": "0", "MUR_NO_PROGRESS": "1"})
        env.pop("XDG_RUNTIME_DIR", None)  # the capsule host's socket goes under this HOME
        env.setdefault("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))  # warm, shared
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed mur has it
        env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
        warm = subprocess.run(mur_command() + ["run", "-m", str(capsule), "-t", "warm up"], env=env,
                              capture_output=True, text=True)
        if warm.returncode != 0:
            sys.exit(f"the capsule does not run: {warm.stderr}")
        rows = []
        modes = [*args.modes, *([BEFORE] if args.baseline else [])]
        for n in args.n:
            for mode in modes:
                work = tmp_path / f"n{n}-{mode}"
                work.mkdir()
                mur = mur_command(args.baseline) if mode == BEFORE else mur_command()
                rnd = Round(n, capsule, env, work, mode, mur)
                try:
                    rows.append(rnd.start(args.timeout))
                finally:
                    rnd.stop()
        floor = floor_process(env)
    if args.json:
        print(json.dumps({"rows": rows, "floor": floor, "upstream": UPSTREAM}))
        return 0
    print(f"{sys.executable} (python {sys.version.split()[0]}), {os.cpu_count()} CPUs; capsule {args.manifest.name}")
    print(f"{'N':>4} {'mode':<11} {'all answering':>14} {'lost':>5} {'PSS/capsule':>12} {'anon/capsule':>13} "
          f"{'after a task':>13} {'MemAvail drop':>14} {'CPU-s/launch':>13}  load")
    for r in rows:
        print(f"{r['n']:>4} {r['mode']:<11} {r['all_answering_s']:>12.2f} s {r['lost']:>5} {r['pss_mb'] or 0:>9.1f} MB "
              f"{r['anon_mb'] or 0:>10.1f} MB {r['pss_after_task_mb'] or 0:>10.1f} MB {r['mem_available_drop_mb']:>11.0f} MB "
              f"{r['cpu_s_per_launch'] or 0:>11.2f} s  {r['load']}")
    print(f"floor: a bare interpreter idles at {floor['pss_mb']:.1f} MB PSS ({floor['anon_mb']:.1f} MB anon)")
    print(UPSTREAM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
