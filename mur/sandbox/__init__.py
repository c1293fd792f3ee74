"""Kernel sandbox for shell tools: Landlock + seccomp + rlimits + cgroups (see docs/sandbox.md).

Layout: ``policy`` (pure: manifest + measurements -> ShellPolicy) and thin appliers (``landlock``,
``seccomp``, ``rlimits``, ``cgroups``, ``spawn``); ``probe`` measures the host; ``shell`` is the
per-session executor (``ShellSandbox``); ``elf`` resolves a binary's loader + DT_NEEDED closure;
``access`` lets the unprivileged sandbox uid use the workdir when mur runs as root;
``workdir_guard`` polls the workdir size; ``output`` and ``result`` hold a call's captured output
and outcome (resource-limit attribution, E-RUN-011, the ``shell`` trace event).
"""

__all__ = ["HostProbe", "probe_host"]


def __getattr__(name: str):
    # Lazy, so `python -m mur.sandbox.probe` does not import the module twice (runpy warns).
    if name in __all__:
        from mur.sandbox import probe

        return getattr(probe, name)
    raise AttributeError(name)
