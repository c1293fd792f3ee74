"""`mur gc [-m MANIFEST | --workdir DIR] [--older-than 7d] [--yes] [--json]`: report, then remove with --yes.

Dry run by default: a command that deletes session traces should show what it would delete first
(`git clean -n` style); `--yes` removes exactly what the report lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

DEFAULT_AGE = "7d"


def _older_than(value: str) -> str:
    from mur.trace.report import parse_duration

    try:
        parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--older-than") from exc
    return value


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


def _render(plan, removed, yes: bool, older_than: str) -> str:
    from mur.artifacts.operations import align_columns, display_path

    lines = []
    if plan.items:
        rows = [[i.kind, _size(i.bytes), display_path(i.path), i.reason] for i in plan.items]
        lines.append(align_columns(["KIND", "SIZE", "PATH", "WHY"], rows))
    total = _size(plan.total_bytes)
    if not plan.items:
        lines.append(f"Nothing to remove (no session or compiled component unused for {older_than}).")
    elif yes:
        lines.append(f"Removed {len(removed)} item{'s' * (len(removed) != 1)}, freed {total}.")
    else:
        lines.append(f"Would free {total} ({len(plan.items)} item{'s' * (len(plan.items) != 1)}); "
                     "run again with --yes to remove them.")
    for path in plan.in_use:
        lines.append(f"kept {path}: a running process has it open")
    return "\n".join(lines) + "\n"


def gc(
    manifest: Optional[Path] = typer.Option(None, "--manifest", "-m",
                                            help="A capsule's murmur.yaml (or its dir): clean <dir>/workdir. "
                                                 "Default: ./workdir."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="A directory of ses_* sessions to clean."),
    older_than: str = typer.Option(DEFAULT_AGE, "--older-than", callback=_older_than,
                                   help="Only what was last used longer ago than this: 30m, 12h, 7d."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove them (default: only report)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line: dry_run, items, total_bytes, in_use."),
) -> None:
    """Report old sessions and unused compiled components (~/.murmur/cache); remove them with --yes."""
    from mur.cli.render import emit
    from mur.housekeeping.gc import apply_gc, plan_gc
    from mur.trace.report import parse_duration
    from mur.paths import cache_root
    from mur.wasm.engine import fingerprints

    if manifest is not None and workdir is not None:
        raise typer.BadParameter("give --workdir or --manifest, not both", param_hint="--manifest")
    if manifest is not None:
        from mur.paths import manifest_path

        roots = [manifest_path(manifest).parent / "workdir"]
    else:
        roots = [workdir if workdir is not None else Path("workdir")]
    plan = plan_gc([r.absolute() for r in roots], cache_root(), older_than=parse_duration(older_than) // 1000,
                   fingerprint=fingerprints().values())
    removed = apply_gc(plan) if yes else []
    result = {"dry_run": not yes, "items": [i.to_json() for i in plan.items], "total_bytes": plan.total_bytes,
              "removed": len(removed), "in_use": [str(p) for p in plan.in_use]}
    emit(result, json_out, lambda _r: _render(plan, removed, yes, older_than))


def register(app: typer.Typer) -> None:
    app.command("gc")(gc)
