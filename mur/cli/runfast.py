"""`mur run` without the CLI framework: a well-formed invocation is parsed here, so a run (and
`--explain-scope`) does not pay for importing typer and building its parameter adapters (about a
fifth of a warm run's start-up).

Only the plain forms are taken: `--opt VALUE`, `--opt=VALUE`, `-m VALUE`, `-mVALUE` and the flags,
each option as `mur run --help` lists it (mur.cli.run declares them; tests hold the two equal), with
the same defaults, environment variables and checks. Anything else (`--help`, an unknown option, a
positional argument, a value typer would refuse, a completion request) returns None, and typer
parses the command as always, so its help, usage errors and messages stay exactly its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mur.digits import is_digits

# option -> (RunOptions field, kind): "path", "str", "port", "flag"
VALUED: dict[str, tuple[str, str]] = {
    "--manifest": ("manifest", "path"),
    "-m": ("manifest", "path"),
    "--task": ("task", "str"),
    "-t": ("task", "str"),
    "--system-prompt": ("system_prompt", "str"),
    "--lifecycle-task-acceptance": ("task_acceptance", "str"),
    "--lifecycle-after-task": ("after_task", "str"),
    "--workdir": ("workdir", "path"),
    "--bind": ("bind", "str"),
    "--port": ("port", "port"),
    "--containment": ("containment", "str"),
    "--a2a-token-file": ("a2a_token_file", "path"),
    "--tls-cert": ("tls_cert", "path"),
    "--tls-key": ("tls_key", "path"),
}
FLAGS: dict[str, str] = {
    "--json": "json",
    "--verbose": "verbose",
    "-v": "verbose",
    "--no-env-file": "no_env_file",
    "--explain-scope": "explain_scope",
}
# Options whose value may come from the environment when not given (typer's envvar=).
ENVVARS: dict[str, str] = {
    "a2a_token_file": "MURMUR_A2A_TOKEN_FILE",
    "tls_cert": "MURMUR_A2A_TLS_CERT",
    "tls_key": "MURMUR_A2A_TLS_KEY",
}
CHOICES: dict[str, tuple[str, ...]] = {
    "containment": ("advisory", "scoped", "sealed"),
    "task_acceptance": ("none", "single", "queue"),
    "after_task": ("exit", "sleep"),
}


def _value(kind: str, raw: str) -> Any:
    """The option's value as typer converts it; None when typer would refuse it (it then says why)."""
    if kind == "path":
        return Path(raw)
    if kind == "port":
        if not is_digits(raw) or not 0 < int(raw) < 65536:
            return None
        return int(raw)
    return raw


def parse(args: list[str]) -> dict[str, Any] | None:
    """RunOptions' fields for `mur run ARGS`, or None when typer must parse them."""
    found: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in FLAGS:
            found[FLAGS[arg]] = True
            continue
        name, eq, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not eq and len(arg) > 2 and arg[:2] in ("-m", "-t") and arg[1] != "-":
            name, attached, eq = arg[:2], arg[2:], "="  # click's -mVALUE
        if name not in VALUED:
            return None  # --help, an unknown option, a positional argument, `--`: typer's to answer
        field, kind = VALUED[name]
        if eq:
            raw = attached
        elif i < len(args):
            raw = args[i]
            i += 1
        else:
            return None  # "requires an argument": typer says so
        value = _value(kind, raw)
        if value is None:
            return None
        found[field] = value
    for field, var in ENVVARS.items():
        if field not in found and os.environ.get(var):
            found[field] = Path(os.environ[var])
    for field, allowed in CHOICES.items():
        if field in found and found[field] not in allowed:
            return None
    if ("tls_cert" in found) != ("tls_key" in found):
        return None
    return found


def run_fast(args: list[str]) -> bool:
    """Run `mur run ARGS` if it parses here (True), else leave it to typer (False)."""
    if os.environ.get("_MUR_COMPLETE"):
        return False
    fields = parse(args)
    if fields is None:
        return False
    from mur.cli.runexec import execute
    from mur.session.options import RunOptions

    execute(RunOptions(**fields))
    return True
