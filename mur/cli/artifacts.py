"""`mur publish`, `mur install`, `mur list`, `mur search`, `mur doctor`: artifacts between stores and registries."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

Registry = Annotated[Optional[str], typer.Option("--registry", help="Registry URL, or 'local'.")]


def publish(
    artifact: Optional[str] = typer.Argument(
        None, help="The .mur.zip to publish (default: ./<name>-<version>.mur.zip from ./murmur.yaml)."
    ),
    registry: Registry = None,
    platform: Optional[str] = typer.Option(None, "--platform", help="Platform tag (os-arch) for a native artifact."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Do not compile its component for `mur run` here."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON line (what was published and compiled)."),
) -> None:
    """Publish an artifact to the local store (default) or a registry."""
    from mur.artifacts.operations import publish as do_publish
    from mur.cli.progress import transfer_bar
    from mur.cli.render import StepReporter

    outcome = do_publish(artifact, registry=registry, platform=platform, progress=transfer_bar,
                         compile=not no_compile, reporter=StepReporter())
    if json_:
        from mur.cli.render import emit_json

        emit_json(outcome.to_json())
        return
    for note in outcome.notes:
        print(note)
    print(f"Published {outcome.artifact_id}", flush=True)


def install(
    ref: Optional[str] = typer.Argument(
        None, help="name@version, a bare name (latest), or a local .mur.zip path; none: every manifest artifact."
    ),
    global_: bool = typer.Option(False, "--global", "-g", help="Install into ~/.murmur/artifacts (no lock)."),
    registry: Registry = None,
    no_compile: bool = typer.Option(False, "--no-compile", help="Do not compile components for `mur run` now."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON line (what was installed and compiled)."),
) -> None:
    """Install artifacts into the project store (pinning murmur.lock) or the global store."""
    from mur.artifacts import operations
    from mur.cli.progress import transfer_bar
    from mur.cli.render import StepReporter, emit_json

    how = {"global_": global_, "registry": registry, "progress": transfer_bar, "compile": not no_compile,
           "reporter": StepReporter()}
    if ref is not None:
        outcome = operations.install(ref, **how)
        if json_:
            emit_json(outcome.to_json())
        elif outcome.from_file:
            print(f"Installed {outcome.name}@{outcome.version} from {outcome.source}", flush=True)
        else:
            print(
                f"Installed {outcome.name}@{outcome.version} \u2192 {operations.display_path(outcome.zip_path)}",
                flush=True,
            )
        return
    report = operations.install_manifest(**how)
    if json_:
        emit_json(report.to_json())
        if report.failures:
            raise typer.Exit(1)
        return
    if report.total == 0:
        print("No artifacts in manifest.")
        return
    for done in report.installed:
        print(f"Installed {done.name}@{done.version} \u2192 {operations.display_path(done.zip_path)}")
    if not report.failures:
        return
    n = report.total
    print()
    print(f"{len(report.failures)} of {n} artifact{'' if n == 1 else 's'} failed to install:")
    for ref_text, err in report.failures:
        print()
        print(f"  {ref_text}")
        for line in err.render().splitlines():
            print(f"    {line}")
    sys.stdout.flush()
    raise typer.Exit(1)


def list_(
    ctx: typer.Context,
    global_: bool = typer.Option(False, "--global", "-g", help="List the global store."),
    all_: bool = typer.Option(False, "--all", help="List the project and the global store (adds SCOPE)."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON line (a list)."),
) -> None:
    """List installed artifacts: NAME VERSION RUNTIME PLATFORMS."""
    from mur.artifacts import operations

    if global_ and all_:
        _usage_error(ctx, "the argument '--global' cannot be used with '--all'")
    rows = operations.list_rows(global_=global_, all_=all_)
    if json_:
        from mur.cli.render import emit_json

        emit_json(operations.rows_json(rows))
        return
    if not rows:
        print("No artifacts found.")
        return
    print(operations.render_table(rows, with_scope=all_), flush=True)


def search(
    ctx: typer.Context,
    query: str = typer.Argument(..., help="Text to find in artifact names, descriptions and tags."),
    registry: Optional[str] = typer.Option(
        None, "--registry", help="'local', a registry URL, or an artifacts-index.json path or URL."
    ),
    remote: bool = typer.Option(
        False, "--remote", help="Search the remote index: registry.index_url, else the public default index."
    ),
    limit: int = typer.Option(10, "--limit", help="Show at most this many results (>= 1)."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON line (a list)."),
) -> None:
    """Search artifacts: NAME VERSION RUNTIME DESCRIPTION (the local stores unless a remote is configured)."""
    if limit < 1:
        _usage_error(ctx, f"invalid value '{limit}' for '--limit': must be at least 1")
    if remote and registry is not None:
        _usage_error(ctx, "the argument '--remote' cannot be used with '--registry'")
    from mur.artifacts import search as searching

    hits = searching.search(query, registry=registry, remote=remote, limit=limit)
    if json_:
        from mur.cli.render import emit_json

        emit_json(searching.hits_json(hits))
        return
    if not hits:  # upstream's words on stdout (scripts match them); where mur looked on stderr
        from mur.manifest.yamlio import one_line

        print("No results found.", flush=True)
        if searching.searches_local_only(registry, remote=remote):
            print(f"  note: nothing matches '{one_line(query)}' in the local stores; search a remote index "
                  "with --remote, or --registry URL|PATH", file=sys.stderr)
        return
    print(searching.render_table(hits), flush=True)


def doctor() -> None:
    """Check every manifest artifact against the stores and murmur.lock (exit 1 on a problem)."""
    from mur.artifacts.doctor import run_doctor

    report = run_doctor()
    print(report.render(), flush=True)
    if not report.ok:
        raise typer.Exit(1)


def _usage_error(ctx: typer.Context, message: str) -> None:
    """Show a usage error the way the parser does (usage line, try-help line, `Error: ...`), exit 2."""
    print(ctx.get_usage(), file=sys.stderr)
    print(f"Try '{ctx.command_path} --help' for help.\n", file=sys.stderr)
    print(f"Error: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("publish")(publish)
    app.command("install")(install)
    app.command("list")(list_)
    app.command("search")(search)
    app.command("doctor")(doctor)
