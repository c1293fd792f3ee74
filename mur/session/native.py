"""Native tools (`implementation: native`): staged as upstream does, run inside the shell sandbox.

Upstream stages a native artifact's `bin/<name>` executable at `tools/<name>/<name>` and runs it
with `{"data", "log_path"}` JSON on stdin, reading a `{"status", "summary", "data"}` JSON object
from stdout, in the tools' workdir — bounded by rlimits and the cgroup but not confined. mur keeps
the protocol and the staged layout and confines the run like a shell tool's:

* the copy the model sees, `tools/<name>/<name>` (0755), is never executed: a tool could swap it;
* the runtime's copy is `<session dir>/bin/<name>` (0755, outside every tree a tool can write); the
  shell sandbox (mur.sandbox.shell) gets that directory first on its PATH and the tool's name in its
  allow list (:class:`SandboxCaps`), so it resolves, grants and runs the binary exactly like a
  `capabilities.shell.allow` binary: Landlock, seccomp, rlimits, the session cgroup, the session uid;
* the result becomes a tool-result (:func:`tool_result`), traced as a `tool_call`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mur.fsafe import Tree
    from mur.manifest.capsule import Capabilities
    from mur.resolve.artifacts import ResolvedArtifact
    from mur.sandbox.result import ShellResult
    from mur.wasm.types import ToolResult

BIN = "bin"


def exec_dir(session_dir: Path) -> Path:
    """Where the runtime's copies of native binaries live: `<session dir>/bin`."""
    return Path(session_dir) / BIN


def place(name: str, data: bytes, tool_dir: Tree, session_dir: Path) -> Path:
    """Write `tools/<name>/<name>` (0755, in `tool_dir`, a mur.fsafe.Tree) and the runtime's copy;
    returns the runtime's copy."""
    fd = tool_dir.create(name, 0o755)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    target = exec_dir(session_dir)
    target.mkdir(mode=0o755, exist_ok=True)
    path = target / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o755)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o755)  # whatever the umask
    return path


def local_binary(source_dir: Path, name: str) -> Path | None:
    """A local-source native tool's binary: `bin/<name>`, else `<name>`, in its directory."""
    for rel in (Path(BIN) / name, Path(name)):
        if (source_dir / rel).is_file():
            return source_dir / rel
    return None


class SandboxCaps:
    """The capsule's capabilities as the shell sandbox sees them: shell.allow plus the native tools
    (everything else is the capsule's own)."""

    def __init__(self, caps: Capabilities, native: list[str]):
        self._caps = caps
        self._native = [n for n in native if n not in caps.shell_allow]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._caps, name)

    @property
    def shell_allow(self) -> list[str]:
        return list(self._caps.shell_allow) + self._native


def sandbox_env(session_dir: Path, host_env: dict[str, str]) -> dict[str, str]:
    """The host environment the sandbox resolves binaries in: `<session dir>/bin` first on PATH."""
    env = dict(host_env)
    env["PATH"] = os.pathsep.join([str(exec_dir(session_dir)), env.get("PATH", os.defpath)])
    return env


def stdin_for(raw: str, log_path: str | None) -> bytes:
    """Upstream's native input: `{"data": <the call's JSON arguments as a string>, "log_path"}`."""
    return json.dumps({"data": raw, "log_path": log_path}).encode()


def tool_result(name: str, res: ShellResult) -> ToolResult:
    """A native run's ShellResult -> ToolResult, as upstream reads it: stdout's JSON object
    (`data` a string, or any other JSON value re-encoded); no stdout -> the exit status; stdout that
    is not JSON -> passed/error by exit status with stdout as data."""
    from mur.wasm.types import ToolResult

    ok = res.exit_code == 0
    out = (res.stdout or "").strip()
    limit = _limit_note(res)
    if not out:
        how = f"native tool '{name}' exited with {'exit status: ' + str(res.exit_code)}{limit}"
        return ToolResult("passed" if ok and not limit else "error", summary=how, data=res.stderr or None)
    try:
        body = json.loads(out)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return ToolResult("passed" if ok and not limit else "error", summary=f"native tool '{name}' completed{limit}",
                          data=res.stdout, data_path=res.full_output_path, truncated=bool(res.truncated))
    status = body.get("status")
    data = body.get("data")
    if data is not None and not isinstance(data, str):
        data = json.dumps(data, separators=(",", ":"))
    summary = body.get("summary") if isinstance(body.get("summary"), str) else None
    return ToolResult(status if status in ("passed", "failed") else "error", summary=summary, data=data)


def _limit_note(res: ShellResult) -> str:
    if not getattr(res, "resource_limit", None):
        return ""
    from mur.sandbox.shell import limit_error

    return f" — {limit_error(res).render()}"


def stage(res: ResolvedArtifact, tool_dir: Tree, session_dir: Path) -> Path:
    """Stage a resolved native artifact (store `.mur.zip` or local directory); returns the runtime's
    copy. E-IO-003 when the payload is missing."""
    from mur.errors import MurError

    try:
        if res.kind == "store":
            from mur.artifacts.package import ArtifactArchive, native_binary_entry

            data = ArtifactArchive(res.path.read_bytes()).read(native_binary_entry(res.name))
        else:
            found = local_binary(res.path, res.name)
            if found is None:
                raise OSError(f"no bin/{res.name} or {res.name} in {res.path}")
            data = found.read_bytes()
    except Exception as exc:  # noqa: BLE001 - an unreadable payload is one error to the user
        raise MurError("E-IO-003", f"failed to read native binary for {res.name}: {exc} "
                       f"(ensure the binary is at bin/{res.name} inside the .mur.zip)") from exc
    return place(res.name, data, tool_dir, session_dir)
