"""`mur doctor`: each manifest artifact against the stores and `murmur.lock`, with the fix.

Mirrors what `mur run` would refuse (upstream `commands/doctor.rs`): an artifact missing from
both stores, a zip that no longer matches its `.sha256`, and — when a lock exists — a missing
entry, a version mismatch or a hash mismatch. Every failure carries the command that fixes it.
The report is printed on stdout; the CLI exits 1 when any check failed (no `error[...]` line:
the report itself is the diagnostic, as upstream).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mur.artifacts import lock as lockfile
from mur.artifacts.store import Store, global_store, project_store, sha256_hex
from mur.platform import current_platform
from mur.errors import MurError

OK, FAIL, DASH = "\u2713", "\u2717", "\u2014"


@dataclass
class DoctorReport:
    manifest_path: Path
    platform: str
    lines: list[str] = field(default_factory=list)
    passed: int = 0
    fixes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.fixes

    def render(self) -> str:
        out = [f"Checking {self.manifest_path} for {self.platform}...", *self.lines, ""]
        if self.ok:
            out.append("All checks passed.")
            return "\n".join(out)
        failed = len(self.fixes)
        out.append(
            f"{self.passed} check{'' if self.passed == 1 else 's'} passed, "
            f"{failed} error{'' if failed == 1 else 's'} found."
        )
        out.append("")
        out.extend(f"Fix: {fix}" for fix in self.fixes)
        return "\n".join(out)


def run_doctor(cwd: Path | None = None) -> DoctorReport:
    """Check every artifact the nearest murmur.yaml declares."""
    from mur.artifacts.operations import find_project_root
    from mur.manifest.load import load_capsule

    root = find_project_root(cwd)
    manifest_path = root / "murmur.yaml"
    capsule = load_capsule(manifest_path, resolve_env=False).capsule  # no provider key needed
    lock = lockfile.read_lock(lockfile.lock_path(root))
    platform = current_platform()
    stores = [("project", Store(project_store(root))), ("global", Store(global_store()))]
    report = DoctorReport(manifest_path, platform)
    refs = [f"{a.name}@{a.display_version}" if a.source is not None else f"{a.name}@{a.version}" for a in capsule.artifacts]
    width = max((len(r) for r in refs), default=0)

    def line(mark: str, ref: str, where: str, detail: str = "") -> None:
        text = f"  {mark}  {ref:<{width}}   {where}"
        report.lines.append(f"{text}   {DASH} {detail}" if detail else text)

    for decl, ref in zip(capsule.artifacts, refs):
        if decl.source is not None and decl.uses_local_source:
            source = Path(decl.source)
            source = source if source.is_absolute() else root / source
            if source.exists():
                line(OK, ref, "local source")
                report.passed += 1
            else:
                line(FAIL, ref, "local source", f"skill source path not found: {source}")
                report.fixes.append(f"{decl.name}: create {source} or fix artifacts[].source in murmur.yaml")
            continue
        name, version = decl.name, decl.version or ""
        found = None
        for scope, store in stores:
            try:
                stored = store.lookup(name, version, platform)
            except MurError as err:
                line(FAIL, ref, scope, err.message)
                report.fixes.append(f"{name}: {err.hint or err.message}")
                found = "error"
                break
            if stored is not None:
                found = (scope, stored)
                break
        if found == "error":
            continue
        if found is None:
            line(FAIL, ref, "missing", "not installed in the project or global store")
            report.fixes.append(f"mur install {ref}")
            continue
        scope, stored = found
        data = stored.zip_path.read_bytes()
        actual = sha256_hex(data)
        if actual != stored.sha256:
            line(FAIL, ref, scope, f"artifact integrity check failed for {ref} (zip does not match its .sha256)")
            report.fixes.append(f"mur install {ref}" + (" -g" if scope == "global" else ""))
            continue
        if lock is None:  # nothing to verify against: presence is the whole check (upstream says nothing more)
            line(OK, ref, scope)
            report.passed += 1
            continue
        entry = lock.entry(name)
        if entry is None:
            line(FAIL, ref, scope, f"murmur.lock missing artifact entry for '{name}'")
            report.fixes.append(f"mur install {ref}")
        elif entry.resolved_version != version:
            line(
                FAIL,
                ref,
                scope,
                f"murmur.lock version mismatch for '{name}': manifest requested {version}, "
                f"lock pinned {entry.resolved_version}",
            )
            report.fixes.append(f"{name}: remove the stale murmur.lock entry, then run mur install {ref}")
        elif entry.sha256 != actual:
            line(FAIL, ref, scope, f"artifact integrity check failed for {ref}")
            report.lines.append(f"        expected sha256 (murmur.lock): {entry.sha256}")
            report.lines.append(f"        actual sha256 (on disk):       {actual}")
            report.fixes.append(
                f"{name}: artifact on disk does not match murmur.lock {DASH} re-publish or delete the lock"
            )
        else:
            line(OK, ref, f"{scope}, lock ok")
            report.passed += 1
    return report
