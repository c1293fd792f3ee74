"""`mur front run --config FILE` (hidden): the front that holds a deployment's stable address.

Started on the target by deploy (mur.front.control renders the command); not for direct use.
"""

from __future__ import annotations

import typer


def run(config: str = typer.Option(..., "--config", help="The front's front.json.")) -> None:
    """Serve until SIGTERM (foreground; logs on stderr)."""
    import os
    from pathlib import Path

    from mur.deploy import procid
    from mur.front.server import run as serve

    # front.pid beside front.json, with the process's identity, once the address is held: the shell
    # commands of deploy (mur_alive) signal only this very process; a successor replaces the file
    pidfile = Path(config).resolve().parent / "front.pid"

    def stopped() -> None:
        if procid.recorded_pid(pidfile) == os.getpid():
            procid.remove_pidfile(pidfile)

    raise typer.Exit(serve(config, lambda: procid.write_pidfile(pidfile, os.getpid()), stopped))


def register(app: typer.Typer) -> None:
    front = typer.Typer(help="Internal: the front that holds a deployment's address across releases.",
                        no_args_is_help=True)
    front.command("run")(run)
    app.add_typer(front, name="front", hidden=True)
