"""`mur run --explain-scope`, remembered: the same invocation over the same inputs prints the same
report, so the second time it is read back instead of computed.

Computing it costs little; loading what computes it does not (the CLI framework, pydantic and the
manifest models: several times a bare interpreter's start-up). A remembered report is printed
by mur.cli.main before any of them is imported.

What a report depends on, and how each part is checked before one is reused:
* the invocation: the arguments, the working directory, the whole environment, the effective uid,
  gid and groups, the interpreter and the mur version. Their digest names the entry (nothing of the
  environment is stored, only that digest: it may hold secrets);
* the files explain reads, present or absent (mur.session.prechecks.explain_inputs: the manifest,
  its `.env`, the two config files): each entry holds their SHA-256, taken before the report was
  computed, and every one is read again;
* the code that computed it: the size and mtime of every module that was loaded (mur's own and
  the installed packages'; the standard library goes with the interpreter's version);
* the host probe: the report is kept only when it was computed from the probe cache's answer
  (mur.sandbox.probecache), and reused only while that cache holds the same answer under this
  process's key. So it goes stale exactly when the probe cache does, and `mur probe --refresh` or
  MUR_PROBE_CACHE=off (which turns this off too) reach it as well.
Only a report that was printed is kept; an invocation that failed is computed again every time.
What the computation wrote to stderr (warnings) is kept with it and written again.

Entries live in `<cache root>/explain`, one file per invocation (the newest KEEP), through
mur.privatecache (owned by this uid, nobody else may write them, atomic writes). Any doubt is a
miss, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from mur import __version__, privatecache
from mur.sandbox import probecache

SCHEMA = 1
DIR_NAME = "explain"
KEEP = 64  # entries; one per distinct invocation, the oldest go first
INPUT_LIMIT = 4 * 1024 * 1024  # bytes of one input file; a bigger one is never remembered
ENTRY_LIMIT = 1024 * 1024


def enabled() -> bool:
    """Reports are remembered only over the probe cache (MUR_PROBE_CACHE=off turns both off)."""
    return probecache.enabled()


class Replay:
    """A remembered report: what to write to stderr, then the report (JSON or text)."""

    def __init__(self, stderr: str, report: dict[str, Any], json_out: bool):
        self.stderr, self.report, self.json = stderr, report, json_out


class Invocation:
    """This process's `mur` invocation, as far as a report can depend on it (its digest)."""

    # No dataclasses here: this module is on the path that must start fast, and they import inspect.
    def __init__(self, digest: str):
        self.digest = digest

    @classmethod
    def of(cls, args: list[str]) -> Invocation | None:
        """The invocation, read now (before anything changes the environment: `.env` loading does);
        None where there is no working directory."""
        try:
            cwd = os.getcwd()
        except OSError:
            return None
        material = {
            "schema": SCHEMA, "mur": __version__, "python": sys.executable, "version": sys.version,
            "uid": os.geteuid(), "gid": os.getegid(), "groups": sorted(os.getgroups()),
            "cwd": cwd, "args": list(args), "env": sorted(os.environ.items()),
        }
        text = json.dumps(material, ensure_ascii=True, separators=(",", ":"))
        return cls(hashlib.sha256(text.encode("ascii")).hexdigest())

    @property
    def file(self) -> str:
        return f"{self.digest}.json"

    def replay(self) -> Replay | None:
        """The remembered report for this invocation, when every input, module and the probe are
        as they were; else None."""
        raw = privatecache.read(DIR_NAME, self.file, ENTRY_LIMIT)
        if raw is None:
            return None
        try:
            entry = json.loads(raw.decode("utf-8"))
            if entry["schema"] != SCHEMA or entry["invocation"] != self.digest:
                return None
            if any(fingerprint(Path(path)) != seen for path, seen in entry["inputs"]):
                return None
            if _code_changed(entry["code"]):
                return None
            key = probecache.key()
            if key is None or probecache.load(key) != entry["probe"]:
                return None
            return Replay(str(entry["stderr"]), dict(entry["report"]), bool(entry["json"]))
        except (ValueError, KeyError, TypeError):
            return None

    def recorder(self, inputs: list[Path]) -> Recorder | None:
        """Fingerprint `inputs` now, before the report is computed from them (so an input changed
        meanwhile makes the entry miss, never a stale hit); None when one cannot be fingerprinted."""
        seen = [(str(path), fingerprint(path)) for path in inputs]
        if any(value is None for _, value in seen):
            return None
        return Recorder(self, seen)


class Recorder:
    """Keeps one invocation's report, with the inputs as they were before it was computed."""

    def __init__(self, invocation: Invocation, inputs: list[tuple[str, str | None]]):
        self.invocation, self.inputs = invocation, inputs

    def record(self, stderr: str, report: dict[str, Any], json_out: bool, probe: Any) -> bool:
        """Keep the printed report; False (nothing kept) unless `probe` is the probe cache's answer."""
        from dataclasses import asdict

        key = probecache.key()
        cached = probecache.load(key) if key is not None else None
        try:
            if cached is None or asdict(probe) != cached:
                return False  # measured without the cache, or not the host's probe at all
        except TypeError:
            return False
        entry = {"schema": SCHEMA, "invocation": self.invocation.digest, "inputs": self.inputs,
                 "code": _code_stamp(), "probe": cached, "stderr": stderr, "report": report, "json": json_out}
        try:
            data = json.dumps(entry, ensure_ascii=True).encode("ascii")  # unsorted: the report prints in its order
        except (TypeError, ValueError):
            return False
        if len(data) > ENTRY_LIMIT:
            return False
        return privatecache.write(DIR_NAME, self.invocation.file, data, keep=KEEP)


def fingerprint(path: Path) -> str | None:
    """What `path` holds, as explain would read it: `sha256:<hex>` of a regular file, `absent`, or
    `special:<type>` for a directory, FIFO, ...; None when it cannot be told (unreadable, too big)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block us
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    except IsADirectoryError:
        return "special:dir"
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"special:{stat.S_IFMT(st.st_mode):o}"
        if st.st_size > INPUT_LIMIT:
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 16):
            digest.update(chunk)
        return f"sha256:{digest.hexdigest()}"
    except OSError:
        return None
    finally:
        os.close(fd)


def _dirs(*names: str) -> tuple[str, ...]:
    import sysconfig

    return tuple({os.path.join(sysconfig.get_path(name), "") for name in names})


def _code_stamp() -> list[list[Any]]:
    """[file, size, mtime_ns] of every loaded module outside the standard library (whose
    site-packages, where packages may be installed, counts as outside)."""
    stdlib, packages = _dirs("stdlib", "platstdlib"), _dirs("purelib", "platlib")
    out = []
    for name in sorted(sys.modules):
        file = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(file, str) or (file.startswith(stdlib) and not file.startswith(packages)):
            continue
        try:
            st = os.stat(file)
        except OSError:
            continue
        out.append([file, st.st_size, st.st_mtime_ns])
    return out


def _code_changed(stamps: list[list[Any]]) -> bool:
    for file, size, mtime in stamps:
        try:
            st = os.stat(file)
        except OSError:
            return True
        if st.st_size != size or st.st_mtime_ns != mtime:
            return True
    return False
