"""The fleet half of `mur deploy` (mur/cli/deploy.py hands over to it): a rolling deploy to the targets
of deploy.yaml, the fleet-wide lifecycle commands and the grouped views. Parses nothing itself;
calls mur.fleet and renders.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from mur.cli.render import StepReporter, emit, emit_json

RESULT_MARK = {"deployed": "✓", "unchanged": "=", "failed": "✗", "rolled back": "↩", "removed": "↩",
               "skipped": "-", "not started": "·"}


def fleet_file(manifest: Path, explicit: Path | None, no_fleet: bool, single: bool) -> Path | None:
    """The fleet file this `mur deploy` uses, or None for a single-target deploy."""
    from mur.fleet.config import find_fleet_file

    if no_fleet or single:
        return None
    return find_fleet_file(manifest, explicit)


def render_rollout(r: dict[str, Any]) -> str:
    lines = [f"∞ fleet {r['fleet']}: " + ("done" if r["ok"] else f"stopped at {r.get('stopped_at') or '?'}")
             + f" ({r['elapsed']:.1f}s)"]
    rows = []
    for t in r["targets"]:
        old, new = t["old"], t["new"]
        was = f"{old['version']} r{old['release']}" if old.get("release") is not None else "-"
        now = f"{new['version']} r{new['release']}" if new.get("release") is not None else "-"
        rows.append([RESULT_MARK.get(t["result"], "?"), t["target"], t["where"], f"{was} → {now}", t["result"],
                     f"{t['elapsed']:.1f}s" if t.get("elapsed") is not None else "-", t.get("deployment_id") or "-"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for t in r["targets"]:
        if t.get("error"):
            lines.append(f"  {t['target']}: {t['error'].splitlines()[0]}")
    if r.get("left_out"):
        lines.append(f"  not selected: {', '.join(r['left_out'])}")
    return "\n".join(lines) + "\n"


def deploy_fleet(path: Path, manifest: Path, *, destination: str | None, only: list[str], host: str | None,
                 env: list[str], batch: str | None, skip_unreachable: bool, lock_wait: float, json_out: bool,
                 common: dict[str, Any], check: bool, ctx: Any = None) -> None:
    """`mur deploy` with a fleet file: the rollout, its report, exit 1 unless every target is done."""
    from mur.fleet import config, plan as fplan
    from mur.fleet.rollout import Options, Rollout

    fleet = config.read(path, destination)
    capsule = _capsule_name((path.resolve().parent / fleet.manifest).resolve())
    plan = fplan.resolve(fleet, path, capsule=capsule, destination=destination, only=only, host=host, env_args=env,
                         batch=fplan.parse_batch(batch) if batch else None)
    if manifest.resolve() != plan.manifest and manifest != Path("murmur.yaml"):
        from mur.errors import MurError

        raise MurError("E-FLEET-001", f"{path.name} deploys {plan.manifest}, not {manifest.resolve()}",
                       "drop --manifest, or fix manifest: in the fleet file")
    reporter = ctx.reporter if ctx is not None else StepReporter()
    if check:
        from mur.fleet.rollout import preflight_only

        reports = preflight_only(plan, Options(common=common), reporter, ctx)
        emit({"fleet": plan.key, "ok": all(x.get("ok") for x in reports), "targets": reports}, json_out,
             lambda r: "".join(x.get("render") or f"{x['target']}: {x.get('error')}\n" for x in r["targets"]))
        raise typer.Exit(0 if all(x.get("ok") for x in reports) else 1)
    report = Rollout(plan, Options(common=common, skip_unreachable=skip_unreachable, lock_wait=lock_wait,
                                   command=_command_line()), reporter, ctx).run()
    data = report.to_dict()
    emit(data, json_out, render_rollout)
    if not report.ok:  # with --json too: the report on stdout, the error line on stderr
        from mur.errors import MurError

        raise MurError(report.code or "E-FLEET-006", report.error or "the rollout failed", _hint(report.code))


def _hint(code: str | None) -> str | None:
    return {"E-FLEET-005": "nothing changed; fix the target (or leave it out with --only) and deploy again",
            "E-FLEET-006": "the report above says what each target serves now; fix the release and deploy again",
            "E-FLEET-004": "wait for the other rollout, or pass --lock-wait SECONDS"}.get(code or "")


def _command_line() -> str:
    """The command as the lock's holder shows it (never its --env values)."""
    args = sys.argv[1:]
    shown = []
    skip = False
    for a in args:
        if skip:
            shown.append("…")
            skip = False
            continue
        shown.append(a)
        if a == "--env":
            skip = True
    return "mur " + " ".join(a if not a.startswith("--env=") else "--env=…" for a in shown)


def _capsule_name(manifest: Path) -> str:
    from mur.manifest.load import load_capsule

    return load_capsule(manifest, resolve_env=False).capsule.name


# --- views --------------------------------------------------------------------------------------------


def render_ls(records: list[dict[str, Any]]) -> str:
    """`mur deploy ls`: every deployment, grouped by capsule and fleet, then one line per fleet."""
    from mur.fleet.view import fleets, fleet_of, ordered, release_of, summary_line, where

    if not records:
        return "no deployments\n"
    head = ["DEPLOYMENT_ID", "NAME", "VERSION", "RELEASE", "FLEET", "TARGET", "STATUS", "UPDATED", "URL"]
    rows = []
    for r in ordered(records):
        tag = r.get("fleet") if isinstance(r.get("fleet"), dict) else {}
        target = f"{tag['target']} ({where(r)})" if tag.get("target") else where(r)
        rows.append([str(r.get("deployment_id") or ""), str(r.get("name") or ""), str(r.get("version") or ""),
                     str(release_of(r) if release_of(r) is not None else "-"), fleet_of(r) or "-", target,
                     str(r.get("status") or ""), str(r.get("updated_at") or "-"), str(r.get("url") or "")])
    widths = [max(len(x[i]) for x in rows + [head]) for i in range(len(head) - 1)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    out = "\n".join(fmt.format(*row).rstrip() for row in [head] + rows) + "\n"
    groups = fleets(records)
    if groups:
        out += "\n" + "".join(summary_line(g) + "\n" for g in groups)
    return out


def render_many(results: list[dict[str, Any]], verb: str) -> str:
    lines = []
    for r in results:
        if not r.get("ok"):
            lines.append(f"✗ {r['address']}  {r['deployment_id']}  error[{r.get('code')}]: {r.get('error', '').splitlines()[0]}")
            continue
        detail = [str(r.get("status") or verb)]
        if r.get("version"):
            detail.append(f"{r['version']} release {r.get('release') if r.get('release') is not None else '-'}")
        if "agent_card_ok" in r:
            detail.append("answers" if r.get("agent_card_ok") else f"does not answer ({r.get('error') or '?'})")
        if r.get("url") and r.get("status") == "running":
            detail.append(str(r["url"]))
        mark = "✓" if verb != "status" or r.get("status") == "running" else "·"
        lines.append(f"{mark} {r['address']}  {r['deployment_id']}  " + " · ".join(detail))
    return "\n".join(lines) + "\n"


def many(results: list[dict[str, Any]], json_out: bool, verb: str, running: bool = False) -> None:
    """Render a fleet-wide command's results; exit 1 when one failed (3: `status` and one is not running)."""
    emit(results, json_out, lambda r: render_many(r, verb))
    failed = [r for r in results if not r.get("ok")]
    if json_out:  # the report is on stdout; what failed is said on stderr too (the ✗ lines otherwise)
        for r in failed:
            first = (str(r.get("error") or "").splitlines() or [""])[0]
            sys.stderr.write(f"{r['address']}: error[{r.get('code')}]: {first}\n")
    if failed:
        raise typer.Exit(1)
    if running and any(r.get("status") != "running" for r in results):
        raise typer.Exit(3)


def logs(ident: str, lines: int, follow: bool, only: list[str], json_out: bool) -> None:
    from mur.fleet import ops

    def emit_line(label: str, line: str) -> None:
        if json_out:
            emit_json({"address": label, "line": line})
        else:
            sys.stdout.write(f"{label} | {line}\n")
            sys.stdout.flush()

    results = ops.logs(ident, emit_line, lines, follow, only)
    failed = [r for r in results if not r.get("ok")]
    for r in failed:
        sys.stderr.write(f"{r['address']}: error[{r.get('code')}]: {r.get('error')}\n")
    if failed:
        raise typer.Exit(1)


def reporter() -> StepReporter:
    return StepReporter()
