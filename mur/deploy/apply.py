"""Executing plan steps on a Target, with as few round trips as possible: the only place that
turns steps into actions on a host.

One `sha256sum` call learns which files the target already has; only the others are uploaded
(an unchanged redeploy therefore uploads nothing). Directory creation is one command, reference
markers (who uses a shared bundle or artifact) another.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from mur.deploy.steps import TMP_MARK, Mkdir, Run, Step, Symlink, Upload, WriteFile
from mur.deploy.targets.base import Result, Target


@dataclass
class ApplyStats:
    uploaded: int = 0
    uploaded_bytes: int = 0
    skipped: int = 0
    linked: int = 0
    written: list[str] = field(default_factory=list)


def symlink_command(target: str, link: str) -> str:
    """Replace `link` through a temporary name; nothing is written when it already points there
    (a start after the switch relinks `current`: a kill then cannot leave the temporary name)."""
    q = shlex.quote
    tmp = f"{link}{TMP_MARK}"
    return (f"[ \"$(readlink {q(link)} 2>/dev/null)\" = {q(target)} ] || "
            f"{{ ln -sfn {q(target)} {q(tmp)} && mv -Tf {q(tmp)} {q(link)}; }}")


def apply_steps(target: Target, steps: Iterable[Step], dep_id: str = "",
                note: Callable[[str], None] | None = None) -> ApplyStats:
    """Run the steps in order; uploads whose remote digest already matches are skipped."""
    steps = list(steps)
    stats = ApplyStats()
    q = shlex.quote
    files = [s for s in steps if isinstance(s, (Upload, WriteFile))]
    alts = [s.alt for s in files if isinstance(s, Upload) and s.alt]
    have = target.digests([s.dst for s in files] + alts) if files else {}
    refs_cmds: list[str] = []
    links: list[str] = []
    pending_dirs: list[Mkdir] = []

    def flush_dirs() -> None:
        if not pending_dirs:
            return
        paths = " ".join(q(d.path) for d in pending_dirs)
        modes = " && ".join(f"chmod {d.mode:o} {q(d.path)}" for d in pending_dirs)
        target.run(f"mkdir -p {paths} && {modes}", what="create directories")
        pending_dirs.clear()

    def flush_links() -> None:
        if links:
            target.run(" && ".join(links), what="link unchanged files from the previous release")
            links.clear()

    # what is still to be written: a full disk is reported with it (Target.disk_full)
    target.need_bytes = sum(s.size for s in files if isinstance(s, Upload)) + sum(len(s.content) for s in files
                                                                                 if isinstance(s, WriteFile))
    for step in steps:
        if isinstance(step, Mkdir):
            pending_dirs.append(step)
            continue
        flush_dirs()
        if isinstance(step, Upload):
            fresh = have.get(step.dst) != step.sha256
            if fresh and step.alt and have.get(step.alt) == step.sha256:
                # Unchanged since the previous release: link it there instead of sending it again.
                links.append(f"{{ ln -f {q(step.alt)} {q(step.dst)} 2>/dev/null || cp -p {q(step.alt)} {q(step.dst)}; }}")
                stats.linked += 1
            elif fresh:
                if note:
                    note(f"upload {Path(step.dst).name} ({_size(step.size)})")
                target.put_file(Path(step.src), step.dst, step.mode, scratch=step.scratch)
                target.need_bytes = max(0, target.need_bytes - step.size)
                stats.uploaded += 1
                stats.uploaded_bytes += step.size
                stats.written.append(step.dst)
            else:
                stats.skipped += 1
            if step.refs and dep_id:
                marker = q(f"{step.refs}/{dep_id}")
                refs_cmds.append(f"mkdir -p {q(step.refs)} && touch {marker}" if fresh
                                 else f"if [ -d {q(step.refs)} ]; then touch {marker}; fi")
        elif isinstance(step, WriteFile):
            if have.get(step.dst) != step.sha256:
                target.put_file(step.content, step.dst, step.mode)
                stats.written.append(step.dst)
            else:
                stats.skipped += 1
        elif isinstance(step, Symlink):
            flush_links()
            target.run(symlink_command(step.target, step.link), what=f"link {step.link}")
        elif isinstance(step, Run):
            flush_links()
            run_step(target, step)
    flush_dirs()
    flush_links()
    target.need_bytes = 0
    if refs_cmds:
        target.run("; ".join(refs_cmds) + "; true", check=False, what="record references")
    return stats


def run_step(target: Target, step: Run) -> Result:
    return target.run(step.cmd, sudo=step.sudo, check=step.check, timeout=step.timeout, what=step.label or "command",
                      helper=step.helper, first=step.first)


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.0f} MB"
    if n >= 1_000:
        return f"{n / 1_000:.0f} KB"
    return f"{n} B"
