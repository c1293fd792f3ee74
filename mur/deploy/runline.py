"""A release's `mur run` command line: what every init system, and the supervisor, starts.

A leaf that imports nothing: `mur supervise run` (one process beside each deployment's service, for
its whole life) builds this line and so loads neither the deploy data types nor dataclasses
(~2.4 MB of its private memory).
"""

from __future__ import annotations

# A release's tools' workdir (`mur run --workdir`, seeded with the capsule's workdir files), beside
# `workdir/`, which holds the runtime's session records (mur.session.workdir keeps them next to the
# manifest when they are not inside --workdir): per release, pruned at each start, gone with destroy.
TOOLS_WORKDIR = "work"


def run_argv(release_dir: str, port: int, bind: str, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The `mur run` command line of a release (deploy's contract: one JSON line on stdout)."""
    return [f"{release_dir}/mur", "run", "--manifest", f"{release_dir}/murmur.yaml",
            "--workdir", f"{release_dir}/{TOOLS_WORKDIR}", "--json", "--bind", bind, "--port", str(port), *extra]
