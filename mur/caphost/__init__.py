"""The capsule host: one process per user (and per mur build) that has imported the runtime once
and forks each `mur run` from there, so idle capsules share those pages copy-on-write.

Why: an idle capsule is mostly the interpreter's imports (pydantic and the manifest models, the A2A
server, wasmtime's bindings): ~28 MB private memory and ~0.3 CPU-s to start, per capsule. A fork
of a process that has them loaded starts in a tenth of that CPU and keeps a fraction of the pages.

By default (mur.caphost.client.handoff, outside a systemd unit): a non-interactive service run
goes to the host, started if none runs; a one-shot `--task` run and `--explain-scope` (at a terminal
too: Ctrl-C, Ctrl-Z and the window's size are relayed) go to a host that runs, and without one run here and, when they went well and another did
less than a minute before, start one for the next.
`MUR_CAPSULE_HOST=on` starts one for every non-interactive run, in a unit too; `off` never (deploy's
supervisor and images set it: docs/run.md). Then `mur run` (the client, mur.caphost.client) hands
its arguments, environment, working directory and stdin/stdout/stderr to the host
(mur.cli.capsulehost), which forks the capsule; anything the host cannot do exactly as the client
would have (below) makes the client run the capsule itself.

Isolation stays exactly as strong: each capsule is its own process, and the host serves only a
client of its own uid whose security context it shares (uids, gids, groups, capabilities,
no_new_privs, seccomp, namespaces, LSM label: mur.caphost.context); the forked capsule takes the
client's rlimits, umask, nice value, OOM score and CPU affinity, and moves itself into the
client's cgroups (every hierarchy) before it runs anything; the tools' sandbox is the session's
own, as always. The client stays the service's main process: it forwards signals to the capsule
(through a pidfd) and exits with its status.
"""
