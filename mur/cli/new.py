"""`mur new tool|capsule|agent NAME`: a starter project that builds and runs offline."""

from __future__ import annotations

import typer

KINDS = ("capsule", "tool", "agent")


def new(
    kind: str = typer.Argument(..., metavar="tool|capsule|agent", autocompletion=lambda: list(KINDS),
                               help="tool: a WASM tool (+ demo capsule); capsule: a plain capsule; "
                                    "agent: a model-driven capsule (offline model server)."),
    name: str = typer.Argument(..., help="Project name: lowercase letters, digits and '-' (the directory too)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line: kind, path, files, next."),
) -> None:
    """Create ./NAME from a template, then print the commands that build and run it."""
    if kind not in KINDS:
        raise typer.BadParameter(f"'{kind}' is not one of: {', '.join(KINDS)}", param_hint="KIND")
    from mur.cli.render import emit_json
    from mur.scaffold.new import scaffold

    done = scaffold(kind, name)
    if json_out:
        emit_json(done.to_json())
        return
    print(f"Created {kind} {name} in {done.root}")
    print("Next:")
    for step in done.next_steps():
        print(f"  {step}")


def register(app: typer.Typer) -> None:
    app.command("new")(new)
