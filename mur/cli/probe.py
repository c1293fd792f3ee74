"""`mur probe [--json]`: what this host can enforce (Landlock ABI, seccomp, cgroups, systemd).

Deploy runs it on every target with the pinned runtime bundle, so the preflight report reflects the
real kernel under the real runtime, not a guess from the deploying machine. The answer is cached
per boot (mur.sandbox.probecache); --refresh measures again and rewrites that cache.
"""

from __future__ import annotations

import typer


def probe(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON line."),
    refresh: bool = typer.Option(False, "--refresh", help="Measure again instead of reading this boot's cached answer."),
) -> None:
    """Report what containment this host can enforce."""
    from mur.cli.render import emit_json
    from mur.deploy.hostprobe import probe_report

    if refresh:
        from mur.sandbox.probe import probe_host

        probe_host(refresh=True)  # the process cache probe_report reads, and the disk cache

    report = probe_report()
    if json_out:
        emit_json(report)
        return
    from mur.humanize import plain

    width = max(len(k) for k in report)
    for key, value in report.items():
        typer.echo(f"{key.ljust(width)}  {plain(value)}")


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
