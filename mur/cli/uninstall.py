"""`mur uninstall NAME[@VERSION] [-g]` and `mur unpublish NAME@VERSION`: remove from the local stores."""

from __future__ import annotations

from typing import Optional

import typer


def _report(removal, verb: str, json_out: bool) -> None:
    from mur.cli.render import emit_json, note

    if json_out:
        emit_json(removal.to_json())
        return
    for version in removal.versions:
        print(f"{verb} {removal.name}@{version} from {removal.place}")
    if removal.unpinned:
        note(f"unpinned {removal.name} in murmur.lock")


def uninstall(
    ref: str = typer.Argument(..., help="NAME (every version) or NAME@VERSION."),
    global_: bool = typer.Option(False, "--global", "-g", help="Remove from ~/.murmur/artifacts, not the project."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line: name, versions, scope, store, unpinned."),
) -> None:
    """Remove an installed artifact from the project store (and its murmur.lock pin) or the global one."""
    from mur.artifacts.removal import uninstall as do_uninstall

    _report(do_uninstall(ref, global_=global_), "Uninstalled", json_out)


def unpublish(
    ref: str = typer.Argument(..., help="NAME@VERSION."),
    registry: Optional[str] = typer.Option(None, "--registry", help="Only 'local' (the default) can delete."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line: name, versions, scope, store."),
) -> None:
    """Remove a version from the local registry (~/.murmur/artifacts) so it can be published again."""
    from mur.artifacts.removal import unpublish as do_unpublish

    _report(do_unpublish(ref, registry=registry), "Unpublished", json_out)


def register(app: typer.Typer) -> None:
    app.command("uninstall")(uninstall)
    app.command("unpublish")(unpublish)
