"""The lazy CLI: `mur --help` printed from the command table (mur.cli.commands) is typer's own
rendering of the fully imported app, and a command imports only its own module."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
import typer

from mur.cli import commands, main


def eager_group():
    return typer.main.get_command(main.build_app(lazy=False))


def test_the_table_lists_every_command_with_its_own_help_in_typers_order():
    group = eager_group()
    ctx = group.make_context("mur", ["run"], resilient_parsing=True)
    shown = [n for n in group.list_commands(ctx) if not group.get_command(ctx, n).hidden]
    hidden = [n for n in group.list_commands(ctx) if group.get_command(ctx, n).hidden]
    assert [name for name, _, _ in commands.COMMANDS] == shown
    assert [name for name, _ in commands.HIDDEN] == hidden
    for name, _, text in commands.COMMANDS:
        assert text == inspect.cleandoc(group.get_command(ctx, name).help), name


def test_each_command_comes_from_the_module_the_table_names():
    registered = set()
    for module in commands.modules():
        app = typer.Typer()
        __import__(module, fromlist=["register"]).register(app)
        names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
        assert names and all(commands.module_of(n) == module for n in names), (module, names)
        registered |= names
    assert registered == set(commands.names())


TYPER_HELP = ("from mur.cli import main\nimport typer\n"
              "typer.main.get_command(main.build_app(lazy=False)).main(['--help'], prog_name='mur', standalone_mode=False)\n")


@pytest.mark.parametrize("columns", ["40", "60", "80", "100", "200"])
def test_mur_help_is_what_typer_prints(tmp_path, columns):
    env = {**os.environ, "COLUMNS": columns, "HOME": str(tmp_path)}
    fast = subprocess.run([sys.executable, "-m", "mur", "--help"], capture_output=True, text=True, env=env,
                          timeout=60)
    slow = subprocess.run([sys.executable, "-c", TYPER_HELP], capture_output=True, text=True, env=env, timeout=60)
    assert fast.returncode == 0 and slow.returncode == 0, slow.stderr
    assert fast.stdout == slow.stdout
    assert fast.stderr == ""


def test_no_arguments_prints_the_same_help_through_typer(tmp_path):
    env = {**os.environ, "COLUMNS": "80", "HOME": str(tmp_path)}
    bare = subprocess.run([sys.executable, "-m", "mur"], capture_output=True, text=True, env=env, timeout=60)
    fast = subprocess.run([sys.executable, "-m", "mur", "--help"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert bare.returncode == 2  # click's no_args_is_help is a usage error
    assert bare.stderr.strip() == fast.stdout.strip()


LOADED = (
    "import json, sys\n"
    "from mur.cli.main import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "print(json.dumps({'code': code, 'loaded': sorted(m for m in sys.modules if m.startswith('mur.cli.')\n"
    "                  and m.rsplit('.', 1)[-1] not in ('main', 'commands', 'lazy', 'render', 'roothelp', 'noplugins'))}),\n"
    "      file=sys.stderr)\n"
)


def loaded(tmp_path, *args: str) -> dict:
    run = subprocess.run([sys.executable, "-c", LOADED, *args], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})
    return json.loads(run.stderr.strip().splitlines()[-1])


def test_a_command_imports_only_its_own_module(tmp_path):
    assert loaded(tmp_path, "--help") == {"code": 0, "loaded": []}
    assert loaded(tmp_path, "install", "--help") == {"code": 0, "loaded": ["mur.cli.artifacts"]}
    assert loaded(tmp_path, "trace", "show", "--help") == {"code": 0, "loaded": ["mur.cli.trace"]}
    assert loaded(tmp_path, "schema", "artifact") == {"code": 0, "loaded": ["mur.cli.schema"]}


def test_unknown_commands_and_bad_options_still_say_so(tmp_path):
    def mur(*args):
        return subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, timeout=60,
                              cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})

    typo = mur("rn")
    assert typo.returncode == 2 and "No such command 'rn'. Did you mean 'run'?" in typo.stderr
    unknown = mur("bogus")
    assert unknown.returncode == 2 and "No such command 'bogus'." in unknown.stderr
    assert "Traceback" not in unknown.stderr
    sub = mur("trace", "shw")
    assert sub.returncode == 2 and "Did you mean 'show'?" in sub.stderr
    bad = mur("run", "--port", "x")
    assert bad.returncode == 2 and "Invalid value for '--port'" in bad.stderr
    version = mur("-V")
    assert version.returncode == 0 and version.stdout.startswith("mur ")


def test_the_supervisor_runs_without_typer(tmp_path):
    """`mur supervise run` stays up for its service's whole life: typer and the deploy CLI would be
    ~12 MB of it, the deploy data types (and dataclasses) 2.4 MB. A bad spec is still the supervisor's error line; anything else goes to typer."""
    heavy = "('typer', 'click', 'dataclasses', 'mur.deploy.steps', 'mur.deploy.init')"
    script = LOADED.replace("m.startswith('mur.cli.')", f"(m.startswith('mur.cli.') or m in {heavy})")
    run = subprocess.run([sys.executable, "-c", script, "supervise", "run", "--spec", str(tmp_path / "none.json")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})
    assert json.loads(run.stderr.strip().splitlines()[-1]) == {"code": 1, "loaded": []}
    assert "error[E-DEPLOY-004]: cannot read service spec" in run.stderr
    helped = subprocess.run([sys.executable, "-c", script, "supervise", "run", "--help"], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})
    assert "--spec" in helped.stdout and "typer" in helped.stderr.splitlines()[-1]


def test_an_exception_on_a_background_thread_is_an_error_line_not_a_traceback(tmp_path):
    """What main() installs for a whole `mur` process: a thread that dies of an exception nothing
    caught says so in one error line (MUR_DEBUG=1: Python's traceback), and the command goes on."""
    script = (
        "import threading, sys\n"
        "from mur.cli import main\n"
        "main._quiet_threads()\n"
        "t = threading.Thread(target=lambda: 1 / 0, name='pipe-7'); t.start(); t.join()\n"
        "print('went on')\n"
    )
    quiet = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stdout == "went on\n"
    assert quiet.stderr.splitlines() == [
        "error[E-INTERNAL]: unexpected ZeroDivisionError on thread pipe-7: division by zero",
        "  hint: rerun with MUR_DEBUG=1 to see the traceback, and report it",
    ]
    loud = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "MUR_DEBUG": "1"})
    assert "Traceback" in loud.stderr and loud.stdout == "went on\n"
