"""`mur schema [capsule|artifact|fleet]`: print a manifest's JSON Schema (for editors; docs/manifest.md)."""

from __future__ import annotations

import typer

KINDS = ("capsule", "artifact", "fleet")


def schema(
    kind: str = typer.Argument("capsule", metavar="[capsule|artifact|fleet]", autocompletion=lambda: list(KINDS),
                               help="capsule: the murmur.yaml `mur run` reads; artifact: the one `mur build` reads; "
                                    "fleet: the deploy.yaml `mur deploy` reads."),
) -> None:
    """Print the JSON Schema of a manifest, e.g. `mur schema > murmur.schema.json` for the YAML language server."""
    if kind not in KINDS:
        raise typer.BadParameter(f"'{kind}' is not one of: {', '.join(KINDS)}", param_hint="KIND")
    import json

    if kind == "fleet":
        from mur.fleet.config import json_schema as fleet_schema

        print(json.dumps(fleet_schema(), indent=2, ensure_ascii=False))
        return
    from mur.manifest.schema import json_schema

    print(json.dumps(json_schema(kind), indent=2, ensure_ascii=False))


def register(app: typer.Typer) -> None:
    app.command("schema")(schema)
