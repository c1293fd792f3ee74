"""`mur front run --config FILE` (hidden): the front that holds a deployment's stable address.

Started on the target by deploy (mur.front.control renders the command); not for direct use.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    front = typer.Typer(help="Internal: the front that holds a deployment's address across releases.",
                        no_args_is_help=True)

    @front.command("run")
    def run(config: str = typer.Option(..., "--config", help="The front's front.json.")) -> None:
        """Serve until SIGTERM (foreground; logs on stderr)."""
        from mur.front.server import run as serve

        raise typer.Exit(serve(config))

    app.add_typer(front, name="front", hidden=True)
