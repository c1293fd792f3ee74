"""Kernel sandbox for shell tools: a composed root + session disk + Landlock + seccomp + rlimits +
cgroups (see docs/sandbox.md).

Decide, then apply: ``facts`` measures the host, ``decide`` turns the manifest and those facts into
one frozen ShellPolicy (pure; its parts: ``policy``, ``viewplan``, ``diskplan``); the appliers read
only that value (``isolation`` and ``namespaces`` with ``rootfs`` and ``disk`` in the holder,
``spawn``/``zygote`` with ``landlock``, ``seccomp``, ``rlimits``; ``cgroups``; ``egress``).
``probe`` (+ ``probeview``) measures the host; ``shell`` is the per-session executor
(``ShellSandbox``), ``ceiling`` its storage (the session disk, ``mirror`` copying the tools' tree in
and out) and ``watcher`` the E-RUN-013 guard; ``guestdisk`` the same ceiling for a session without
subprocesses; ``elf`` resolves a binary's loader + DT_NEEDED closure; ``access`` lets the leased
uid use the workdir when mur runs as root; ``output`` and ``result`` hold a call's captured output
and outcome (resource-limit attribution, E-RUN-011, the ``shell`` trace event).
"""

__all__ = ["HostProbe", "probe_host"]


def __getattr__(name: str):
    # Lazy, so `python -m mur.sandbox.probe` does not import the module twice (runpy warns).
    if name in __all__:
        from mur.sandbox import probe

        return getattr(probe, name)
    raise AttributeError(name)
