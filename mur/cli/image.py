"""`mur image`: the capsule as an OCI image.

    mur image build [-m murmur.yaml] [-t TAG] [--json]     reproducible: same inputs, same image ID
    mur image push TAG [--json]                             to the registry the tag names
    mur image save TAG -o FILE [--json]                     one OCI archive (also `docker load`-able)
    mur image load FILE [--json]                            the archive into this (or DOCKER_HOST's) engine
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mur.cli.options import Manifest
from mur.cli.render import emit

# Every image command takes it.
JsonOut = Annotated[bool, typer.Option("--json", help="One JSON line on stdout.")]


def _progress():
    from mur.cli.render import StepReporter

    return StepReporter()


def _human_build(r: dict) -> str:
    cap = r["capsule"]
    state = "unchanged (the engine already had it)" if r["unchanged"] else "built"
    lines = [f"∞ {cap['name']} {cap['version']} -> {r['tag']}",
             f"  id        {r['id']}  ({state})",
             f"  runtime   mur {r['runtime']['version']} ({r['runtime']['origin']})",
             f"  base      {r['base']['ref']}",
             f"  layer     {r['layer']['diff_id']} ({r['layer']['size'] // (1 << 20)} MiB)"]
    run = r["docker_run"]
    lines += [f"  token     {run['token']}",
              f"  serve     {run['serve']}",
              f"  send      {run['send']}",
              f"  stop      {run['stop']}   (docs/image.md: the hardened flags, a token file instead)"]
    lines += [f"  note      {n}" for n in r.get("notes") or []]
    return "\n".join(lines) + "\n"


def _human_ref(r: dict) -> str:
    from mur.humanize import plain

    return "\n".join(f"{k:<16} {plain(v)}" for k, v in r.items()) + "\n"


def build(
    manifest: Manifest = Path("murmur.yaml"),
    tag: Optional[str] = typer.Option(None, "--tag", "-t", help="Image reference (default mur-<name>:<version>)."),
    base_image: str = typer.Option("mur-base:bookworm", "--base-image", help="Base image (images/build-base.sh)."),
    mur_binary: Optional[Path] = typer.Option(None, "--mur-binary", help="Use this runtime file (its version must equal the pin)."),
    release_source: Optional[str] = typer.Option(None, "--release-source", help="DIR or https://BASE with mur-<v>-<platform> + checksums.txt."),
    no_precompile: bool = typer.Option(False, "--no-precompile", help="Let the container compile the components at start."),
    json_out: JsonOut = False,
) -> None:
    """Build the capsule's image (base + pinned runtime + capsule + precompiled components)."""
    from mur.resolve.shipped import ship
    from mur.image import BuildOptions, build_image
    from mur.image.reference import default_tag

    inputs = ship(manifest)
    opts = BuildOptions(base_image=base_image, mur_binary=mur_binary.resolve() if mur_binary else None,
                        release_source=release_source, precompile=not no_precompile)
    result = build_image(inputs, tag or default_tag(inputs.name, inputs.version), _progress(), opts)
    emit(result.to_json(), json_out, _human_build)


def push(
    tag: str = typer.Argument(..., help="Image reference naming its registry: HOST[:PORT]/NAME[:TAG]."),
    json_out: JsonOut = False,
) -> None:
    """Push an image to its registry (credentials: `docker login`)."""
    from mur.image import push_image

    ref = push_image(tag, _progress())
    emit({"tag": ref.tag, "id": ref.id, "digest": ref.digests[0].split("@", 1)[1], "reference": ref.digests[0]},
         json_out, _human_ref)


def save(
    tag: str = typer.Argument(..., help="Image reference."),
    output: Path = typer.Option(..., "--output", "-o", help="Archive file to write."),
    json_out: JsonOut = False,
) -> None:
    """Save an image as one OCI archive for air-gapped hosts (`docker load -i FILE` there)."""
    from mur.image import save_image

    emit(save_image(tag, output, _progress()).to_json(), json_out, _human_ref)


def load(
    archive: Path = typer.Argument(..., help="An archive from `mur image save` (or `docker save`)."),
    json_out: JsonOut = False,
) -> None:
    """Load an image archive into the engine (local, or DOCKER_HOST)."""
    from mur.image import load_image

    ref = load_image(archive, _progress())
    emit({"tag": ref.tag, "id": ref.id}, json_out, _human_ref)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="OCI images of capsules: build, push, save, load.", no_args_is_help=True)
    group.command("build")(build)
    group.command("push")(push)
    group.command("save")(save)
    group.command("load")(load)
    app.add_typer(group, name="image")
