"""The command table: every top-level command, the module that registers it, and its help line.

`mur --help` is printed from this table alone (no typer, no command module imported), and the
typer app imports a command's module only when that command runs (mur.cli.lazy). So the help here
must say what the command's own docstring or `help=` says: tests/cli/test_cli_lazy.py holds them
equal. The order is the order of `mur --help`: plain commands, then groups, as typer lists them.
"""

from __future__ import annotations

APP_HELP = "Package AI-agent capsules, run them in isolation, deploy them to Linux VMs and containers."

# (name, module, help)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("run", "mur.cli.run", "Run a capsule: validate, probe the kernel, stage a session workdir, execute, trace."),
    ("build", "mur.cli.build", "Build a .mur.zip from murmur.yaml plus exactly its requires_files (or from a skill, with --skill)."),
    ("new", "mur.cli.new", "Create ./NAME from a template, then print the commands that build and run it."),
    ("publish", "mur.cli.artifacts", "Publish an artifact to the local store (default) or a registry."),
    ("install", "mur.cli.artifacts", "Install artifacts into the project store (pinning murmur.lock) or the global store."),
    ("list", "mur.cli.artifacts", "List installed artifacts: NAME VERSION RUNTIME PLATFORMS."),
    ("search", "mur.cli.artifacts", "Search artifacts: NAME VERSION RUNTIME DESCRIPTION (the local stores unless a remote is configured)."),
    ("doctor", "mur.cli.artifacts", "Check every manifest artifact against the stores and murmur.lock (exit 1 on a problem)."),
    ("uninstall", "mur.cli.uninstall", "Remove an installed artifact from the project store (and its murmur.lock pin) or the global one."),
    ("unpublish", "mur.cli.uninstall", "Remove a version from the local registry (~/.murmur/artifacts) so it can be published again."),
    ("send", "mur.cli.a2a", "Send a task to a capsule and print its result."),
    ("cancel", "mur.cli.a2a", "Cancel a task: queued, waiting for input, or (agent capsules) running, at its next step."),
    ("watch", "mur.cli.a2a", "Follow a capsule's event stream (stream/watch) until it closes."),
    ("ps", "mur.cli.deploy", "List deployments (same as `mur deploy ls`)."),
    ("destroy", "mur.cli.deploy", "Stop, remove the remote files, then forget a deployment (same as `mur deploy destroy`)."),
    ("probe", "mur.cli.probe", "Report what containment this host can enforce."),
    ("gc", "mur.cli.gc", "Report old sessions and unused compiled components (~/.murmur/cache); remove them with --yes."),
    ("schema", "mur.cli.schema", "Print the JSON Schema of a manifest, e.g. `mur schema > murmur.schema.json` for the YAML language server."),
    ("registry", "mur.cli.registry", "Run a Nexus-compatible artifact registry."),
    ("deploy", "mur.cli.deploy", "Deploy a capsule as a supervised service (this machine, SSH host, Docker)."),
    ("image", "mur.cli.image", "OCI images of capsules: build, push, save, load."),
    ("export", "mur.cli.export", "Export a capsule for an orchestrator (Kubernetes)."),
    ("host", "mur.cli.host", "Prepare hosts for mur deploy (deploy user, sudoers, cgroup delegation, kernel)."),
    ("vm", "mur.cli.vm", "Local VMs (qemu) prepared as mur deploy hosts, for laptops and CI."),
    ("trace", "mur.cli.trace", "Read the trace.jsonl a session wrote."),
    ("eval", "mur.cli.eval", "Read the eval.jsonl a session's murmur-hook-eval wrote, or run a dataset."),
    ("config", "mur.cli.config", "Read or change ~/.murmur/config.yaml and .murmur/config.yaml."),
)
# Registered but left out of `mur --help` (hidden=True where they are registered).
HIDDEN: tuple[tuple[str, str], ...] = (("supervise", "mur.cli.deploy"), ("front", "mur.cli.front"))

# The root options typer adds, as `mur --help` lists them.
OPTIONS: tuple[tuple[str, str], ...] = (
    ("-V, --version", "Print the mur version and exit."),
    ("--install-completion", "Install completion for the current shell."),
    ("--show-completion", "Show completion for the current shell, to copy it or customize the installation."),
    ("--help", "Show this message and exit."),
)


def module_of(name: str) -> str | None:
    for command, module, _ in COMMANDS:
        if command == name:
            return module
    return dict(HIDDEN).get(name)


# Every command module, in the order an eager build registers them (which orders typer's listing).
MODULES: tuple[str, ...] = (
    "mur.cli.run", "mur.cli.build", "mur.cli.new", "mur.cli.artifacts", "mur.cli.uninstall", "mur.cli.registry",
    "mur.cli.a2a", "mur.cli.deploy", "mur.cli.image", "mur.cli.export", "mur.cli.host", "mur.cli.vm",
    "mur.cli.probe", "mur.cli.trace", "mur.cli.eval", "mur.cli.config", "mur.cli.gc", "mur.cli.schema",
    "mur.cli.front",
)


def modules() -> tuple[str, ...]:
    return MODULES


def names() -> list[str]:
    return [name for name, _, _ in COMMANDS] + [name for name, _ in HIDDEN]
