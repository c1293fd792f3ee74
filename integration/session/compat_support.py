"""Helpers for the upstream-compatibility tests: capsules built from our own guests that reproduce
what upstream's test fixtures do, run through the real CLI (a subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
GUESTS = Path(__file__).parent / "guests"
MUR = [sys.executable, "-m", "mur"]


def tool_dir(dest: Path, name: str, runtime: str, wasm: Path, extra: str = "") -> Path:
    """A local-source artifact directory: its murmur.yaml beside a copy of the component."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wasm, dest / f"{name}.wasm")
    (dest / "murmur.yaml").write_text(
        f"name: {name}\nversion: \"0.1.0\"\nruntime: {runtime}\nrequires_files:\n  - {name}.wasm\n{extra}")
    return dest


def native_zip(dest: Path, name: str, version: str, script: Path, description: str = "A native test tool") -> Path:
    """A native tool `.mur.zip` in upstream's layout: murmur.yaml + bin/<name> (0755)."""
    path = dest / f"{name}-{version}.mur.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("murmur.yaml", f"name: {name}\nversion: \"{version}\"\nruntime: tool\nimplementation: native\n"
                                   f"description: {description}\n")
        info = zipfile.ZipInfo(f"bin/{name}")
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o100755 << 16
        zf.writestr(info, script.read_bytes())
    return path


def wasm_zip(dest: Path, name: str, version: str, wasm: Path, runtime: str = "tool") -> Path:
    path = dest / f"{name}-{version}.mur.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("murmur.yaml", f"name: {name}\nversion: \"{version}\"\nruntime: {runtime}\n")
        zf.writestr(f"{name}.wasm", wasm.read_bytes())
    return path


def env(home: Path, **extra: str) -> dict[str, str]:
    out = dict(os.environ)
    out.setdefault("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))
    out.update({"HOME": str(home), "MURMUR_A2A_TIMEOUT_SECS": "20", "LOOPBACK_API_KEY": "sk-loopback"})
    out.update(extra)
    return out


def mur(*args: str, cwd: Path, home: Path, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(MUR + list(args), cwd=cwd, env=env(home, **extra), capture_output=True, text=True,
                          timeout=timeout)


def run_json(manifest: Path, home: Path, *args: str, **extra: str) -> tuple[subprocess.CompletedProcess, Path | None]:
    """`mur run --json` -> (process, session directory or None when refused before serving)."""
    proc = mur("run", "--json", "--no-env-file", "-m", str(manifest), *args, cwd=manifest.parent, home=home, **extra)
    first = proc.stdout.splitlines()[0] if proc.stdout.strip() else ""
    return proc, (Path(json.loads(first)["workdir"]) if first else None)


def events(session: Path, kind: str | None = None) -> list[dict]:
    lines = [json.loads(x) for x in (session / "trace.jsonl").read_text().splitlines() if x.strip()]
    return [e for e in lines if kind is None or e["event_type"] == kind]


class Serving:
    """`mur run` serving A2A (no --task): its URL once it listens, JSON-RPC calls, its end."""

    def __init__(self, manifest: Path, home: Path, *args: str, **extra: str):
        self.proc = subprocess.Popen(MUR + ["run", "--json", "--no-env-file", "-m", str(manifest), *args],
                                     cwd=manifest.parent, env=env(home, **extra), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline()
        if not first:
            raise AssertionError(f"mur run did not start: {self.proc.stderr.read()}")
        info = json.loads(first)
        self.url = "http://" + info["url"].removeprefix("http://")
        self.session = Path(info["workdir"])

    def rpc(self, method: str, params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(self.url + "/", json=body, timeout=30).json()

    def send(self, text: str, message_id: str) -> dict:
        return self.rpc("message/send", {"message": {"messageId": message_id, "role": "user",
                                                     "parts": [{"text": text}]}})["result"]

    def wait_state(self, task_id: str, wanted: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            task = self.rpc("tasks/get", {"id": task_id})["result"]
            if task["status"]["state"] == wanted:
                return task
            if time.monotonic() > deadline:
                raise AssertionError(f"task never reached {wanted}: {task}")
            time.sleep(0.1)

    def stream(self, text: str) -> list[tuple[str, dict]]:
        """message/stream until the final status frame: [(event, data)]."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/stream",
                "params": {"message": {"messageId": "stream-1", "role": "user", "parts": [{"text": text}]}}}
        frames, kind = [], None
        with httpx.stream("POST", self.url + "/", json=body, timeout=60,
                          headers={"accept": "text/event-stream"}) as response:
            for line in response.iter_lines():
                if line.startswith("event: "):
                    kind = line[len("event: "):]
                elif line.startswith("data: "):
                    data = json.loads(line[len("data: "):])
                    frames.append((kind, data))
                    if kind == "status" and data.get("final") is True:
                        break
        return frames

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
