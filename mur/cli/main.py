"""Entry point: renders errors once, at the edge, and builds the typer app only when it is needed.

Start-up is most of what a short command costs, so: `mur --help` and `mur --version` are answered
from the command table (mur.cli.commands) without importing typer, and so is a well-formed `mur run`
(mur.cli.runfast); otherwise the root group (mur.cli.lazy) imports only the module of the command
that runs. Every command module imports only typer at module level; heavy libraries (wasmtime,
paramiko, docker, httpx, pydantic) are imported inside the command bodies.
"""

from __future__ import annotations

import os
import sys

from mur import __version__
from mur.cli.commands import modules

INTERRUPTED = 130  # the shell's code for a command ended by SIGINT (128 + 2)
COMPLETE_VAR = "_MUR_COMPLETE"  # typer's completion hook: a run with it set is a Tab press, not --help

# Command modules, each exposing register(app), in `mur --help` order (the bundle imports them by name).
COMMAND_MODULES = modules()


def _version(value: bool) -> None:
    if value:
        print(f"mur {__version__}")
        import typer

        raise typer.Exit()


def build_app(lazy: bool = True):
    """The typer app. `lazy=False` imports and registers every command module up front on a plain
    typer group (what tests compare the lazy group and the table-printed help with)."""
    import typer

    from mur.cli.commands import APP_HELP
    from mur.cli.lazy import APP_SETTINGS, LazyGroup

    app = typer.Typer(
        name="mur",
        help=APP_HELP,
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, powershell)
        **({"cls": LazyGroup} if lazy else {}),
        **APP_SETTINGS,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", "-V", callback=_version, is_eager=True, help="Print the mur version and exit."
        ),
    ) -> None:
        """mur: capsules for AI agents."""

    if not lazy:
        import importlib

        for name in COMMAND_MODULES:
            importlib.import_module(name).register(app)
    return app


def _fast(args: list[str], whole_process: bool) -> bool:
    """Answer `mur --help` and `mur --version` without typer; False when typer has to. A `mur run`
    of a whole process (`whole_process`: its own command line, not a call of main() with arguments
    from a program that goes on afterwards) may be handed to the capsule host
    (mur.caphost.client.handoff): the hand-off takes over fds 0-2 and the process's signals."""
    if os.environ.get(COMPLETE_VAR):
        return False
    if args[:1] == ["__tier-up"]:  # the runtime bundle's background compile (mur.wasm.tierup.command)
        from mur.wasm.tierup import main as tier_up

        sys.exit(tier_up(args[1:]))
    if args[:1] == ["__capsule-host"]:  # the runtime bundle's capsule host (mur.caphost.client.host_command)
        from mur.cli.capsulehost import main as capsule_host

        sys.exit(capsule_host(args[1:], main))
    if args[:1] == ["run"] and whole_process:  # a process's run may go to the capsule host
        from mur.caphost import client

        mode = client.handoff(args)
        if mode is not None:
            code = client.run_via_host(args, mode)
            if code is not None:
                _end_process(code)  # this process only relayed: nothing of it needs the interpreter's teardown
    if args == ["--help"]:
        from mur.cli.roothelp import render

        sys.stdout.write(render())
        return True
    if args in (["--version"], ["-V"]):
        print(f"mur {__version__}")
        return True
    return False


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; MurError -> `error[CODE]` + hint on stderr, exit 1; usage errors exit 2."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        _main(args, argv is None)
    except SystemExit as done:
        if argv is None and args[:1] == ["run"]:
            _end_process(done.code)
        raise


def _end_process(code: object) -> None:
    """End a `mur run` process now that its session is torn down (or the capsule host's capsule
    ended): what the interpreter's exit does that matters (non-daemon threads joined, atexit
    handlers, stdout and stderr flushed), without the teardown of every module and object, which
    took ~45 ms of a ~280 ms run in-process (pydantic's models, wasmtime's objects freed one by one)
    and ~9 ms of a ~105 ms one through the host."""
    import atexit
    import threading

    if isinstance(code, str):
        print(code, file=sys.stderr)
    status = code if isinstance(code, int) else (0 if code is None else 1)
    shutdown = getattr(threading, "_shutdown", None)  # what Py_Finalize calls first: joins the threads
    try:
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream: nothing left to say
                pass
        os._exit(status)


def _quiet_threads() -> None:
    """An exception nothing caught on a background thread is an error line, as on the main thread,
    never Python's traceback (MUR_DEBUG=1 shows it). The command goes on: the thread's owner
    decides what its end means."""
    import threading

    def report(args) -> None:  # noqa: ANN001 - threading.ExceptHookArgs
        if args.exc_type is SystemExit:
            return
        if os.environ.get("MUR_DEBUG") == "1":
            threading.__excepthook__(args)
            return
        name = args.thread.name if args.thread is not None else "?"
        print(f"error[E-INTERNAL]: unexpected {args.exc_type.__name__} on thread {name}: {args.exc_value}", file=sys.stderr)
        print("  hint: rerun with MUR_DEBUG=1 to see the traceback, and report it", file=sys.stderr)

    threading.excepthook = report


def _main(args: list[str], whole_process: bool) -> None:
    try:
        if _fast(args, whole_process):
            _flush()
            sys.exit(0)
    except BrokenPipeError:
        sys.exit(1)
    from mur.cli import noplugins

    noplugins.disable()  # pydantic's plugins: mur uses none, and need not look for them
    if whole_process:
        _quiet_threads()
    from mur.cli.render import Reported
    from mur.errors import MurError

    if "--show-completion" in args or "--install-completion" in args:
        _shell_fallback()
    try:
        code = _command(args)
    except Reported as done:
        _flush()
        sys.exit(done.code)
    except MurError as err:
        _flush()
        from mur.cli.render import terminal_safe

        print(terminal_safe(err.render(), sys.stderr), file=sys.stderr)  # messages quote names tools chose
        sys.exit(1)
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
    if code == 0 and "mur.caphost.client" in sys.modules:  # a run that found no host: one for the next
        _flush()
        sys.modules["mur.caphost.client"].start_for_next()
    sys.exit(code)


def _command(args: list[str]) -> int:
    """Run the command: a well-formed `mur run` (mur.cli.runfast) or `mur supervise run` without
    typer, else through typer; its exit code (typer's own exceptions become theirs; every other one
    goes to the caller)."""
    if args[:1] == ["run"]:
        from mur.cli.runfast import run_fast

        if run_fast(args[1:]):
            return 0
    if args[:2] == ["supervise", "run"]:
        from mur.deploy.supervisor import run_command

        code = run_command(args[2:])
        if code is not None:
            return code
    import typer
    from typer.exceptions import Abort, Exit, TyperException

    try:
        command = typer.main.get_command(build_app())
        rv = command.main(args=args, prog_name="mur", standalone_mode=False, obj={})
    except Abort:
        print("aborted", file=sys.stderr)
        return INTERRUPTED
    except Exit as exc:
        return exc.exit_code
    except TyperException as exc:  # usage errors (bad option values, missing arguments): exit 2
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    if rv == INTERRUPTED:  # typer's answer to a KeyboardInterrupt (Ctrl-C) in any command
        print("interrupted", file=sys.stderr)
    return rv if isinstance(rv, int) and rv not in (0, None) else 0


def _shell_fallback() -> None:
    """typer finds the shell for `--show/--install-completion` in the process tree only: under a
    container's init, cron or a CI runner there is none, and it answered "Shell None is not
    supported". Then the login shell ($SHELL) counts, else bash."""
    from typer import _completion_shared as shared
    from typer import completion

    supported = {s.value for s in shared.Shells}
    detect = shared._get_shell_name

    def name() -> str:
        found = detect()
        if found in supported:
            return found
        login = os.path.basename(os.environ.get("SHELL") or "")
        return login if login in supported else "bash"

    shared._get_shell_name = completion._get_shell_name = name


def _flush() -> None:
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
