"""Test guest (tool world): does what its input's JSON `op` says, so tests can probe the host.

Built once per test session by tests/wasm/conftest.py; never shipped.
"""

import json
import os

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import run as types
from wit_world.imports import chunks, execute, outbound, task


def _ok(data) -> types.ToolResult:
    return types.ToolResult(types.Status.PASSED, None, json.dumps(data), None, False, [])


def _try_read(path: str) -> dict:
    try:
        with open(path) as fh:
            return {"ok": True, "text": fh.read(200)}
    except Exception as exc:  # the point is to report what the guest sees
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


_CALLS = []  # module state: survives between calls only if an instance were reused


def _fill(req):
    """Write {"mb": N} MiB to {"path"}; reports how far it got (an ENOSPC shows as ok False)."""
    written = 0
    chunk = b"\xa5" * (1 << 20)
    with open(req["path"], "wb") as fh:
        for _ in range(req.get("mb", 1)):
            fh.write(chunk)
            fh.flush()
            written += len(chunk)
    return {"written": written}


FS_OPS = {
    "symlink": lambda r: os.symlink(r["target"], r["path"]),
    "link": lambda r: os.link(r["src"], r["path"]),
    "rename": lambda r: os.rename(r["src"], r["path"]),
    "truncate": lambda r: os.truncate(r["path"], r.get("size", 0)),
    "append": lambda r: open(r["path"], "a").write(r.get("text", "x")) and None,
    "stat": lambda r: {"size": os.stat(r["path"]).st_size},
    "lstat": lambda r: {"size": os.lstat(r["path"]).st_size},
    "readlink": lambda r: {"target": os.readlink(r["path"])},
    "mkdir": lambda r: os.mkdir(r["path"]),
    "fill": _fill,
}


class Run(exports.Run):
    def run(self, input: types.ToolInput) -> types.ToolResult:
        req = json.loads(input.data or "{}")
        op = req.get("op")
        if op == "echo":
            return _ok({"data": req.get("payload"), "len": len(input.data or "")})
        if op == "count":
            # What an earlier call left behind: a module global and a file-less heap object.
            _CALLS.append(req.get("tag"))
            return _ok({"calls": list(_CALLS)})
        if op == "read":
            return _ok(_try_read(req["path"]))
        if op == "listdir":
            try:
                return _ok({"ok": True, "entries": sorted(os.listdir(req.get("path", ".")))})
            except Exception as exc:
                return _ok({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        if op == "write":
            try:
                with open(req["path"], "w") as fh:
                    fh.write(req.get("text", "x"))
                return _ok({"ok": True})
            except Exception as exc:
                return _ok({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        if op in FS_OPS:  # filesystem calls a sandbox test needs, each reporting what the guest sees
            try:
                return _ok({"ok": True, **(FS_OPS[op](req) or {})})
            except Exception as exc:
                return _ok({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        if op == "env":
            return _ok(dict(os.environ))
        if op == "http":
            try:
                resp = outbound.send(outbound.Request(req.get("method", "GET"), req["url"], [], None, None))
                return _ok({"ok": True, "status": resp.status, "body": resp.body.decode()})
            except Err as err:
                return _ok({"ok": False, "error": err.value})
        if op == "shell":
            try:
                res = execute.run(req["binary"], req.get("args", []), [])
                return _ok({"ok": True, "exit_code": res.exit_code, "stdout": res.stdout})
            except Err as err:
                return _ok({"ok": False, "error": err.value})
        if op == "ask":
            return _ok({"answer": task.request_input(req.get("prompt", "?"))})
        if op == "chunks":
            for text in req.get("texts", []):
                chunks.emit_chunk(text)
            chunks.emit_thinking_chunk("hmm")
            return _ok({"ok": True})
        if op == "print":
            print(req.get("text", ""))
            return _ok({"ok": True})
        if op == "loop":
            n = 0
            while True:
                n += 1
        if op == "alloc":
            # {"mb": N} allocates N MiB and returns; without "mb" it allocates until it dies.
            hoard, limit = [], req.get("mb")
            while limit is None or len(hoard) < limit:
                hoard.append(bytearray(1024 * 1024))
            return _ok({"allocated_mb": len(hoard)})
        if op == "panic":
            raise RuntimeError("probe guest panicked on purpose")
        if op == "fail":
            return types.ToolResult(types.Status.FAILED, "asked to fail", None, None, False, [("k", "v")])
        return types.ToolResult(types.Status.ERROR, f"unknown op {op!r}", None, None, False, [])
