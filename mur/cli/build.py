"""`mur build [SOURCE] [-o OUT]`: pack an artifact directory into `<name>-<version>.mur.zip`.

A directory holding `app.py` is a Python guest: it is compiled first (componentize-py, cached by
input hash; mur/wasm/build.py). A capsule's guest dir has no archive: building it places
capsule.wasm, and the guest dirs of its local-source tools get built too.

`mur build --skill [NAME|PATH] [SOURCE] [--version V] [--summary TEXT]` packages an external skill
instead (mur/artifacts/skillbuild.py). `--skill` takes zero or one value, which click cannot say:
the command rewrites it to `--skill=VALUE` (the next token, unless it is an option) or `--skill=`.
"""

from __future__ import annotations

from typing import Optional

import typer

ARTIFACT_KEYS = {"runtime", "requires_files", "execution", "implementation"}
CAPSULE_KEYS = {"artifacts", "inference", "capabilities", "lifecycle"}
# Options of `mur build` that consume the next token; that token is never --skill's value.
_VALUE_OPTIONS = ("-o", "--output", "--version", "--summary")


def skill_value_explicit(args: list[str]) -> list[str]:
    """`args` with every bare `--skill` turned into `--skill=VALUE` or `--skill=` (no value)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            out.extend(args[i:])
            break
        if token in _VALUE_OPTIONS:
            out.extend(args[i : i + 2])
            i += 2
            continue
        if token == "--skill":
            following = args[i + 1] if i + 1 < len(args) else None
            if following is not None and not following.startswith("-"):
                out.append(f"--skill={following}")
                i += 2
            else:
                out.append("--skill=")
                i += 1
            continue
        out.append(token)
        i += 1
    return out


def _build_guests(source: str) -> list | None:
    """Compile the Python guests first (app.py); for a capsule, which has no .mur.zip, the placed
    components (else None)."""
    from pathlib import Path

    from mur.wasm.build import build_guests, is_guest_dir

    directory = Path(source)
    if not (directory / "murmur.yaml").is_file():
        return None
    keys = _top_level_keys(directory / "murmur.yaml")
    guest = is_guest_dir(directory)
    # A capsule manifest: no artifact field, and a capsule component (app.py) or a capsule's blocks.
    capsule = not keys & ARTIFACT_KEYS and (guest or bool(keys & CAPSULE_KEYS))
    if not (capsule or guest):
        return None
    from mur.cli.render import note

    built = build_guests(directory, progress=note)
    for path, changed in built:
        note(f"{'built' if changed else 'up to date'}: {path}")
    return [path for path, _ in built] if capsule else None


def _top_level_keys(path) -> set:
    """The top-level keys of a YAML file (empty when it does not parse: the build reports that)."""
    from mur.manifest.yamlio import parse_yaml

    try:
        data = parse_yaml(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - the regular build path gives the proper error
        return {"runtime"}
    return set(data) if isinstance(data, dict) else {"runtime"}


class BuildCommand(typer.core.TyperCommand):
    """`mur build`'s parser: `--skill` takes zero or one value (see the module docstring)."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        return super().parse_args(ctx, skill_value_explicit(list(args)))


def build(
    source: str = typer.Argument(".", help="Artifact source directory (holds murmur.yaml), or the --skill input."),
    output: Optional[str] = typer.Option(
        None, "--output", "-o", help="Output .mur.zip path, or an existing directory to write into."
    ),
    skill: Optional[str] = typer.Option(
        None,
        "--skill",
        metavar="[NAME|PATH]",
        help="Package a skill directory or .zip holding SKILL.md (no murmur.yaml needed). A value "
        "with '/' or '\\' or a leading '.' is the input; any other value is the artifact name.",
    ),
    version: Optional[str] = typer.Option(None, "--version", help="With --skill: the version (default 0.1.0)."),
    summary: Optional[str] = typer.Option(None, "--summary", help="With --skill: the description."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Do not compile the components for `mur run` now."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON line (what was built and compiled)."),
) -> None:
    """Build a .mur.zip from murmur.yaml plus exactly its requires_files (or from a skill, with --skill)."""
    if skill is None:
        if version is not None or summary is not None:
            flag = "--version" if version is not None else "--summary"
            raise typer.BadParameter(f"{flag} is only valid with --skill", param_hint=flag)
        from pathlib import Path

        from mur.artifacts import operations
        from mur.artifacts.build import build_artifact
        from mur.cli.render import StepReporter

        placed = _build_guests(source)
        if placed is not None:  # a capsule: its components are where `mur run -m` loads them
            compiled = [] if no_compile else operations.compile_files(placed, StepReporter())
            if json_:
                _emit({"capsule": source, "components": [str(p) for p in placed], "compiled": compiled})
                return
            print(f"Built capsule {Path(source)}: {len(placed)} component{'s' * (len(placed) != 1)} "
                  f"(run it with: mur run -m {Path(source)})", flush=True)
            return
        path = build_artifact(source, output)
        compiled = [] if no_compile else operations.compile_archives([Path(path).read_bytes()], StepReporter())
    else:
        from mur.artifacts.skillbuild import build_skill

        path = build_skill(source, skill, version=version, summary=summary, output=output)
        compiled = []  # a skill has no component
    if json_:
        _emit({"artifact": path, "compiled": compiled})
        return
    print(f"Built artifact: {path}", flush=True)


def _emit(result: dict) -> None:
    from mur.artifacts.operations import compiled_json
    from mur.cli.render import emit_json

    emit_json(dict(result, compiled=compiled_json(result["compiled"])))


def register(app: typer.Typer) -> None:
    app.command("build", cls=BuildCommand)(build)
