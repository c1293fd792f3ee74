"""The session's side of mur.hooks: a started session -> the plain data build_hooks takes.

Also where an on-stage hook's manifest reaches the session: the description and input schema it
wrote for an allow-listed binary replace the staged tool's, so the model sees them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from mur.hooks.hookset import HookSet
    from mur.session.prechecks import CheckedRun
    from mur.session.staging import Staged
    from mur.session.tools import SessionTools
    from mur.session.workdir import Workdir
    from mur.trace.writer import TraceWriter


class StartedSession(Protocol):
    """What the hooks are built from: a mur.session.runner.Session whose guests' host is started."""

    checked: CheckedRun
    tools: SessionTools
    trace: TraceWriter
    wd: Workdir


def describe_staged(staged: Staged) -> Callable[[str, dict[str, Any]], None]:
    """`on_manifest` for build_hooks: copy a written manifest's description/input_schema onto the tool."""

    def describe(binary: str, manifest: dict[str, Any]) -> None:
        tool = staged.tools.get(binary)
        if tool is None:
            return
        if isinstance(manifest.get("description"), str):
            tool.description = manifest["description"]
        if isinstance(manifest.get("input_schema"), dict):
            tool.input_schema = manifest["input_schema"]

    return describe


def session_hooks(session: StartedSession, *, model_client: Any = None, **options: Any) -> HookSet | None:
    """build_hooks for a session whose guests' host is started (its `tools`, `trace` and `wd`).

    The hooks' run-inference goes through the capsule's driver unless `model_client` is given;
    `options` are build_hooks' tuning knobs (on_artifact, queue_depth, drain_timeout, http_transport).
    """
    # the runtime's staged tools/ stays on the host (bound read-only into a session root): on-stage
    # manifests are written there; the rest goes where the tools see their workdir (session.live)
    tools, wd = session.tools, session.live
    staged = tools.staged
    if not staged.by_role("hook"):
        return None  # (and the hook machinery is not even imported)
    from mur.hooks.launch import HookArtifact, build_hooks
    from mur.session.driver import driver_client

    capsule = session.checked.capsule
    artifacts = [HookArtifact(t.name, t.kind, t.wasm_path, Path(t.dir) / "murmur.yaml") for t in staged.by_role("hook")]
    settings = tools.settings
    if model_client is None:
        model_client = driver_client(tools, capsule.inference)
    return build_hooks(artifacts, capsule, engine=tools.host.engine, emit=session.trace.write,
                       murmur_vars=settings.murmur_vars, grants=settings.grants, preopen_dir=tools.preopen_dir,
                       limits=settings.limits, logs_dir=wd.logs, tools_dir=session.wd.tools, model_client=model_client,
                       on_manifest=describe_staged(staged), **options)
