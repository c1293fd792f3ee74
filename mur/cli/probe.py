"""`mur probe [--json]`: what this host can enforce (Landlock ABI, seccomp, cgroups, systemd).

Deploy runs it on every target with the pinned runtime bundle, so the preflight report reflects the
real kernel under the real runtime, not a guess from the deploying machine.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe(json_out: bool = typer.Option(False, "--json", help="Print one JSON line.")) -> None:
        """Report what containment this host can enforce."""
        from mur.cli.render import emit_json
        from mur.deploy.hostprobe import probe_report

        report = probe_report()
        if json_out:
            emit_json(report)
            return
        from mur.humanize import plain

        width = max(len(k) for k in report)
        for key, value in report.items():
            typer.echo(f"{key.ljust(width)}  {plain(value)}")
