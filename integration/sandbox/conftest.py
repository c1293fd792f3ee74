"""Fixtures for the real-kernel sandbox tests: a started ShellSandbox per test, and the leak check.

Every test's sandbox is closed by the fixture, which then asserts nothing is left behind: no
cgroup directory, no process whose cwd is in the workdir, no ACL entry for the sandbox uid.
Escape attempts record a line for the end-of-run report (``record_escape``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from mur.manifest.capsule import Capabilities
from mur.manifest.network import parse_allow_list
from mur.sandbox.probe import probe_host
from mur.sandbox.shell import ShellSandbox
from sbx_support import ESCAPES, HOST_ENV, assert_nothing_left, capabilities, serving
from hostile import HostileCapsule, make_unprivileged_user, remove_unprivileged_user


@pytest.fixture(autouse=True)
def _requirements(request):
    if request.node.get_closest_marker("requires_root") and os.geteuid() != 0:
        pytest.skip("needs root")
    if request.node.get_closest_marker("requires_landlock") and probe_host().landlock_abi == 0:
        pytest.skip("needs a Landlock-capable kernel")


def _remove(path: str | Path) -> None:
    """Iteratively (mur.fswalk): a test's tools may leave a tree deeper than shutil.rmtree can recurse."""
    from mur.fsafe import Tree

    path = Path(path)
    try:
        with Tree(path.parent) as parent:
            parent.remove_tree(path.name)
    except OSError:
        pass


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="mur-sbx-")
    yield Path(path)
    _remove(path)


@pytest.fixture
def outside():
    """A directory outside the workdir that the sandbox uid could use under plain file permissions."""
    path = tempfile.mkdtemp(prefix="mur-outside-")
    os.chmod(path, 0o777)
    secret = Path(path) / "secret.txt"
    secret.write_text("outside-secret\n")
    os.chmod(secret, 0o644)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sandbox(workdir, request):
    """``sandbox(caps, network_allow=[], host_env=None, own_workdir=False, **ShellSandbox kwargs)`` -> a started
    ShellSandbox, closed and leak-checked (``own_workdir``: not the test's shared workdir, for a second session)."""
    made: list[ShellSandbox] = []

    def make(caps: Capabilities | None = None, network_allow=(), host_env=None, own_workdir=False,
             **kw) -> ShellSandbox:
        where = Path(tempfile.mkdtemp(prefix="mur-sbx-")) if own_workdir else workdir  # a second session's own
        extra.extend([where] if own_workdir else [])
        sb = ShellSandbox(caps or capabilities(), where, f"ses_test{os.getpid()}_{len(made)}_{request.node.name[-20:]}",
                          parse_allow_list(list(network_allow)), host_env=host_env or HOST_ENV, **kw)
        made.append(sb)
        sb.warnings = sb.start()
        return sb

    extra: list[Path] = []
    yield make
    for sb in reversed(made):  # later sessions may hold victims of earlier ones' attacks
        sb.close()
    for sb in made:
        assert_nothing_left(sb)
    for path in extra:
        _remove(path)


@pytest.fixture
def tcp_listeners():
    """Two loopback TCP listeners that greet every connection."""
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(serving(socket.create_server(("127.0.0.1", 0)),
                                               lambda conn: conn.sendall(b"hello\n"))) for _ in range(2)]
        yield [s.getsockname()[1] for s in servers]


@pytest.fixture
def unprivileged_user():
    """A uid with its own HOME (and v1 cgroups delegated to it) to run `mur run` as non-root."""
    if os.geteuid() != 0:
        pytest.skip("needs root to set up another uid")
    user = make_unprivileged_user()
    if isinstance(user, str):
        pytest.skip(user)
    yield user
    remove_unprivileged_user(user)


@pytest.fixture
def hostile(tmp_path):
    """``hostile(user=None, shell_allow=..., capabilities="", ...)`` -> a HostileCapsule to drive.

    With ``user`` the capsule lives in that user's HOME (tmp_path is not reachable by other uids)."""
    count = [0]

    def make(user=None, **kw) -> HostileCapsule:
        count[0] += 1
        base = user.home if user is not None else tmp_path
        return HostileCapsule(base / f"capsule{count[0]}", user=user, **kw)

    return make


@pytest.fixture
def record_escape():
    def record(attempt: str, sandboxed: str, control: str) -> None:
        ESCAPES.append((attempt, sandboxed, control))
    return record


def pytest_terminal_summary(terminalreporter):
    if not ESCAPES:
        return
    terminalreporter.section("sandbox escape attempts (each blocked; control without the sandbox succeeded)")
    for attempt, sandboxed, control in ESCAPES:
        terminalreporter.write_line(f"{attempt:<46} sandboxed: {sandboxed:<52} control: {control}")
