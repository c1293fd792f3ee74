"""The root command group: lists every command from the table, imports a command's module only when
that command is looked up (to run it, print its help or complete it).

A module registers its commands on a typer app of its own, built with the root app's settings, and
all of them are kept: `mur publish` imports mur.cli.artifacts once, and `install` is there too.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperGroup

from mur.cli import commands, roothelp

# What the root app passes its commands (so a lazily loaded one renders as an eager one would).
APP_SETTINGS: dict[str, Any] = {"pretty_exceptions_enable": False, "rich_markup_mode": None}


class _Names(dict):
    """`commands` as click sees it before anything is loaded: every name, for typo suggestions."""


class LazyGroup(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loaded: set[str] = set()
        self.commands = _Names({name: None for name in commands.names()})

    def list_commands(self, ctx: Any) -> list[str]:
        return commands.names()

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        module = commands.module_of(cmd_name)
        if module is None:
            return None
        if module not in self.loaded:
            self._load(module)
        return self.commands.get(cmd_name)

    def _load(self, module: str) -> None:
        app = typer.Typer(**APP_SETTINGS)
        importlib.import_module(module).register(app)
        group = typer.main.get_group(app)
        for name, cmd in group.commands.items():
            self.commands[name] = cmd
        self.loaded.add(module)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # From the table, as `mur --help` prints it without typer: listing imports no command module.
        rows = [(name, roothelp.short_help(text, formatter.width - 6 - max(len(n) for n, _, _ in commands.COMMANDS)))
                for name, _, text in commands.COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
