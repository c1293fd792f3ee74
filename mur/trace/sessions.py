"""Session addresses for `mur trace` (upstream cli.md "Session addresses").

A session is named four ways, resolved against the `ses_*` directories of a workdir (`./workdir` by
default), of its `.murmur/` (where runs before the session directory left the tools' reach kept
them with --workdir) and, for a capsule's own workdir (a murmur.yaml beside it), of `~/.murmur/sessions/`
(where runs with `--workdir <manifest dir>/workdir` keep them):

  full id   ses_<32 hex>              that session
  suffix    d399                      the one session whose id ends with it (case-insensitive, any length)
  ordinal   @1, @2                    the most recent, the second most recent... (ids sort by creation)
  path      workdir/ses_…/trace.jsonl that file, verbatim (a session directory means its trace.jsonl)

No match, or several, is E-TRC-002, in upstream's words (scripts match them): `no sessions found in
workdir at DIR`, `session ID not found in DIR`, `no session found matching suffix 'X' in DIR`,
`ambiguous: 'X' matches N sessions — provide more characters` (then the candidates, one a line),
`@N is out of range — workdir has K sessions`, `invalid ordinal '@x' — expected @1, @2, ...`, `ordinal
must be @1 or higher`; mur adds a hint.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from mur.digits import is_digits
from mur.errors import MurError
from mur.ids import SESSION_UID_RANGES
from mur.paths import MURMUR_DIR

SESSION_ID = re.compile(r"ses_[0-9a-f]{32}")
TRACE_FILE = "trace.jsonl"
MIN_SUFFIX = 1  # upstream takes any suffix; a short one is usually ambiguous, which says so


def list_sessions(workdir: Path) -> list[Path]:
    """Session directories under `workdir`, `workdir/.murmur` and, for a capsule's own workdir,
    `~/.murmur/sessions`; oldest first."""
    found: dict[str, Path] = {}
    shared = _shared(workdir)
    for root in (workdir, workdir / MURMUR_DIR, *shared):
        # streamed, never listed whole: a tool can leave millions of names in the --workdir
        try:
            with os.scandir(root) as children:
                for entry in children:
                    child = root / entry.name
                    if SESSION_ID.fullmatch(entry.name.lower()) and _made_by_mur(child):
                        found.setdefault(entry.name.lower(), child)
        except OSError:
            continue
    return [found[name] for name in sorted(found)]


def _shared(workdir: Path) -> list[Path]:
    """`~/.murmur/sessions` when `workdir` is a capsule's own (a murmur.yaml beside it): only runs with
    `--workdir <manifest dir>/workdir` (or a read-only capsule directory) keep their sessions there. Any
    other workdir lists only what it holds, as upstream: a `--workdir` elsewhere never shows another
    capsule's sessions."""
    from mur.manifest.yamlio import MANIFEST_FILENAME
    from mur.paths import sessions_dir

    try:
        if not (workdir.absolute().parent / MANIFEST_FILENAME).is_file():
            return []
        return [sessions_dir()]
    except (MurError, OSError):  # no home directory: nothing kept there
        return []


def _made_by_mur(path: Path) -> bool:
    """A real directory (never a link) not owned by a session uid: a shell tool (running as one, with
    mur as root) can plant `ses_*` directories in a --workdir; they are not sessions to show root."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and not any(lo <= st.st_uid <= hi for lo, hi in SESSION_UID_RANGES)


def resolve_trace(selector: str | None, workdir: Path) -> Path:
    """The trace.jsonl a session address names (default `@1`); E-TRC-002 when none or several match."""
    address = (selector or "@1").strip()
    if address.startswith("@"):
        return _ordinal(address, workdir)
    lowered = address.lower()
    if SESSION_ID.fullmatch(lowered):
        matches = [s for s in list_sessions(workdir) if s.name.lower() == lowered]
        if not matches:
            raise MurError("E-TRC-002", f"session {address} not found in {workdir}", hint=workdir_hint(workdir))
        return matches[0] / TRACE_FILE
    if _looks_like_path(address):
        return _path(Path(address))
    if len(address) < MIN_SUFFIX:
        raise MurError(
            "E-TRC-002",
            f"session address '{address}' is too short: a suffix needs at least {MIN_SUFFIX} characters",
            hint="use a full session id, a longer suffix, @N, or a path to trace.jsonl",
        )
    matches = [s for s in list_sessions(workdir) if s.name.lower().endswith(lowered)]
    return _one(matches, address, workdir)


def _looks_like_path(address: str) -> bool:
    return "/" in address or address.endswith(".jsonl") or address in (".", "..") or Path(address).exists()


def _path(path: Path) -> Path:
    target = path / TRACE_FILE if path.is_dir() else path
    if not target.is_file():
        raise MurError("E-IO-001", f"trace file not found: {target}")
    return target


def _ordinal(address: str, workdir: Path) -> Path:
    digits = address[1:]
    if not is_digits(digits):  # upstream's words for both
        raise MurError("E-TRC-002", f"invalid ordinal '{address}' — expected @1, @2, ...",
                       hint="@1 is the most recent session, @2 the one before it")
    n = int(digits)
    if n < 1:
        raise MurError("E-TRC-002", "ordinal must be @1 or higher", hint="@1 is the most recent session")
    sessions = list_sessions(workdir)
    if not sessions:
        raise MurError("E-TRC-002", f"no sessions found in workdir at {workdir}", hint=workdir_hint(workdir))
    if n > len(sessions):
        raise MurError(
            "E-TRC-002",
            f"@{n} is out of range — workdir has {len(sessions)} session{'' if len(sessions) == 1 else 's'}",
            hint=workdir_hint(workdir),
        )
    return sessions[-n] / TRACE_FILE


def _one(matches: list[Path], address: str, workdir: Path) -> Path:
    if not matches:
        raise MurError("E-TRC-002", f"no session found matching suffix '{address}' in {workdir}",
                       hint=workdir_hint(workdir))
    if len(matches) > 1:
        names = "\n".join(f"  {m.name}" for m in sorted(matches, key=lambda m: m.name))
        raise MurError("E-TRC-002", f"ambiguous: '{address}' matches {len(matches)} sessions — provide more "
                       f"characters\n{names}", hint="use a longer suffix or the full session id")
    return matches[0] / TRACE_FILE


def workdir_hint(workdir: Path) -> str:
    """What to pass instead: the capsules beside `workdir` that have sessions (a `mur run -m DIR`
    writes them to DIR/workdir, so from the parent directory ./workdir is not where they are), else
    --workdir / -m."""
    near = []
    try:
        with os.scandir(workdir.parent) as children:  # one level, streamed, a few names at most
            for entry in children:
                if entry.is_dir(follow_symlinks=False) and (workdir.parent / entry.name / "murmur.yaml").is_file() \
                        and list_sessions(workdir.parent / entry.name / "workdir"):
                    near.append(entry.name)
                if len(near) == 3:
                    break
    except OSError:
        pass
    if near:
        return (f"sessions of capsules here: pass -m {near[0]}" + (f" (or -m {', -m '.join(near[1:])})" if near[1:] else "")
                + " to read a capsule's sessions, or --workdir DIR")
    if not workdir.is_dir():
        what = "is not a directory" if workdir.exists() else "does not exist"
        return (f"{workdir} {what}; pass -m CAPSULE_DIR (the sessions of `mur run -m CAPSULE_DIR`) or "
                "--workdir DIR (the directory holding the ses_* session directories)")
    return "list the ses_* directories there, or pass -m CAPSULE_DIR or --workdir DIR"
