"""Entry point: builds the typer app and renders errors once, at the edge.

Every command module imports only typer at module level; heavy libraries (wasmtime, paramiko,
docker, httpx, pydantic) are imported inside the command bodies so `mur --help` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from mur import __version__

INTERRUPTED = 130  # the shell's code for a command ended by SIGINT (128 + 2)

# Command modules, each exposing register(app). Order is the order of `mur --help`.
COMMAND_MODULES = (
    "mur.cli.run",
    "mur.cli.build",
    "mur.cli.new",
    "mur.cli.artifacts",
    "mur.cli.uninstall",
    "mur.cli.registry",
    "mur.cli.a2a",
    "mur.cli.deploy",
    "mur.cli.image",
    "mur.cli.export",
    "mur.cli.host",
    "mur.cli.vm",
    "mur.cli.probe",
    "mur.cli.trace",
    "mur.cli.eval",
    "mur.cli.config",
    "mur.cli.gc",
    "mur.cli.schema",
)


def _version(value: bool) -> None:
    if value:
        print(f"mur {__version__}")
        raise typer.Exit()


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="mur",
        help="Package AI-agent capsules, run them in isolation, deploy them to Linux VMs and containers.",
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, powershell)
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", "-V", callback=_version, is_eager=True, help="Print the mur version and exit."
        ),
    ) -> None:
        """mur: capsules for AI agents."""

    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; MurError -> `error[CODE]` + hint on stderr, exit 1; usage errors exit 2."""
    from typer.exceptions import Abort, Exit, TyperException

    from mur.cli.render import Reported
    from mur.errors import MurError

    try:
        command = typer.main.get_command(build_app())
        rv = command.main(args=argv, prog_name="mur", standalone_mode=False)
    except Reported as done:
        _flush()
        sys.exit(done.code)
    except MurError as err:
        _flush()
        from mur.cli.render import terminal_safe

        print(terminal_safe(err.render(), sys.stderr), file=sys.stderr)  # messages quote names tools chose
        sys.exit(1)
    except Abort:
        print("aborted", file=sys.stderr)
        sys.exit(INTERRUPTED)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except TyperException as exc:  # usage errors (bad option values, missing arguments): exit 2
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            print(f"error: {exc}", file=sys.stderr)
        sys.exit(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(INTERRUPTED)
    except BrokenPipeError:
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001 - the one place a stray exception becomes an error line
        if os.environ.get("MUR_DEBUG") == "1":
            raise
        from mur.fsutil import DISK_FULL, disk_full_error

        if isinstance(exc, OSError) and exc.errno in DISK_FULL:  # a write no adapter wrapped
            print(disk_full_error(exc, None).render(), file=sys.stderr)
            sys.exit(1)
        print(f"error[E-INTERNAL]: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        print("  hint: rerun with MUR_DEBUG=1 to see the traceback, and report it", file=sys.stderr)
        sys.exit(1)
    if rv == INTERRUPTED:  # typer's answer to a KeyboardInterrupt (Ctrl-C) in any command
        print("interrupted", file=sys.stderr)
    if isinstance(rv, int) and rv not in (0, None):
        sys.exit(rv)
    sys.exit(0)


def _flush() -> None:
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
