"""`mur trace show|steps --deployment ID [SESSION]`: a deployed session's trace, read where it runs.

The session is addressed as locally (full id, 4+ character suffix, @N; mur.remote.sessions.pick)
among the deployment's sessions; the trace is read read-only (SFTP for an SSH host, mur.fsafe on
this machine), up to mur.jsonl.MAX_BYTES like a local one, and parsed by mur.trace.reader, so the
views are the same as for a local trace.
"""

from __future__ import annotations

from typing import Any, Callable

from mur.errors import MurError
from mur.jsonl import MAX_BYTES


def remote_errors() -> tuple[type[BaseException], ...]:
    """What reading over SFTP (paramiko) or from files raises besides MurError."""
    try:
        from paramiko import SSHException
    except ImportError:  # pragma: no cover - paramiko is a dependency
        return (OSError, EOFError)
    return (OSError, EOFError, SSHException)


def failure(where: str, exc: BaseException) -> MurError:
    """An SFTP or file error while reading a deployment's sessions, as one MurError."""
    if isinstance(exc, MurError):
        return exc
    if isinstance(exc, OSError):
        return MurError("E-IO-003", f"cannot read {where}: {exc.strerror or exc}")
    return MurError("E-DEPLOY-003", f"reading {where} failed: {exc or type(exc).__name__}")


def deployment_trace(ident: str, session: str | None,
                     note: Callable[[str], None] = lambda _t: None) -> tuple[list[dict[str, Any]], str]:
    """(events, where the trace is) of the session `session` names (default @1) of deployment `ident`."""
    from mur.deploy.state import DeploymentStore
    from mur.remote.sessions import open_sessions, pick
    from mur.trace.reader import parse_events

    dep = DeploymentStore().find(ident)
    with open_sessions(dep, note) as sessions:
        where = sessions.where
        try:
            ref = pick(session, sessions.list(), f"deployment {dep.deployment_id} ({where})")
            source = f"{where}/{ref.rel}"
            data = sessions.read(ref, 0, MAX_BYTES + 1)
        except remote_errors() as exc:  # SFTP (paramiko) and file errors, translated once
            raise failure(where, exc) from exc
    if len(data) > MAX_BYTES:
        raise MurError("E-IO-003", f"cannot read {source}: larger than {MAX_BYTES} bytes")
    return parse_events(data, source), source
