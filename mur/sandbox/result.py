"""The outcome of one shell-tool call, and what the kernel's evidence says about it."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from mur.errors import MurError
from mur.trace import events as ev

@dataclass
class ShellResult:
    exit_code: int  # the tool's exit status; 128 + N when killed by signal N
    stdout: str
    stderr: str
    truncated: bool
    full_output_path: str | None
    duration_ms: int
    stdout_bytes: int
    stderr_bytes: int
    binary: str  # canonical absolute path if resolved on PATH, else the bare name
    command: str  # the -c script text, or the argv joined
    resource_limit: str | None  # cpu_seconds | max_file_size_bytes | cgroup_memory_bytes | cgroup_pids_max
    signal: int | None = None
    timed_out: bool = False


def limit_error(result: ShellResult) -> MurError | None:
    """E-RUN-011 for a run the kernel killed for a capabilities.resources limit, else None."""
    if result.resource_limit is None:
        return None
    name = os.path.basename(result.binary)
    return MurError(
        "E-RUN-011",
        f"shell subprocess '{name}' was killed for exceeding capabilities.resources.{result.resource_limit}",
        f"raise capabilities.resources.{result.resource_limit} in murmur.yaml if the tool legitimately needs more",
    )


def shell_trace_fields(result: ShellResult, turn: int) -> dict:
    """The ``shell`` trace event body (upstream section 3.3) minus session_id/timestamp."""
    event = {
        "event_type": ev.SHELL, "turn": turn, "binary": result.binary, "command": result.command,
        "exit_code": result.exit_code, "stdout_bytes": result.stdout_bytes, "stderr_bytes": result.stderr_bytes,
        "duration_ms": result.duration_ms,
    }
    if result.resource_limit:
        event["resource_limit"] = result.resource_limit
    return event


def attribute(signal_number: int | None, timed_out: bool, before: tuple[int, int], after: tuple[int, int],
              cpu_used: float = 0.0, cpu_limit: float | None = None) -> str | None:
    """The one limit the kernel's evidence names, or None when there is none or more than one.

    RLIMIT_CPU with cur == max kills with SIGKILL, not SIGXCPU (the kernel checks the hard limit
    first), so a SIGKILL we did not send, on a child whose rusage reached cpu_seconds, is that limit.
    """
    found = []
    # rusage is tick-sampled: on a loaded VM it was seen up to ~0.2 s under the runtime the kernel
    # compared with RLIMIT_CPU when it sent the SIGKILL (1 s limit, load 5 on 2 cores)
    cpu_hit = cpu_limit is not None and cpu_used >= cpu_limit - max(0.25, 0.05 * cpu_limit)
    if not timed_out and (signal_number == signal.SIGXCPU or (signal_number == signal.SIGKILL and cpu_hit)):
        found.append("cpu_seconds")
    if signal_number == signal.SIGXFSZ and not timed_out:
        found.append("max_file_size_bytes")
    if after[0] > before[0]:
        found.append("cgroup_memory_bytes")
    if after[1] > before[1]:
        found.append("cgroup_pids_max")
    return found[0] if len(found) == 1 else None
