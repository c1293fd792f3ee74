"""Helpers shared by the sandbox integration tests (a uniquely named module: several conftest.py
files exist in this repository, so tests must not ``import conftest``)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import socket
import subprocess
import sysconfig
import threading
from typing import Callable, Iterator

from mur.manifest.capsule import Capabilities
from mur.sandbox import access
from mur.sandbox.shell import ShellSandbox

SYSTEM_PYTHON = "/usr/bin/python3"
HOST_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root", "USER": "root", "TERM": "dumb"}
ESCAPES: list[tuple[str, str, str]] = []


@functools.lru_cache(maxsize=1)
def python_stdlib() -> str:
    """The system python's stdlib dir (its interpreter_runtime grant)."""
    out = subprocess.run([SYSTEM_PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip() or sysconfig.get_paths()["stdlib"]


def capabilities(allow=("bash", "cat", "python3"), **extra) -> Capabilities:
    data = {"shell": {"allow": list(allow)}}
    if "python3" in allow:
        data["shell"]["interpreter_runtime"] = [
            {"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]
    for key, value in extra.items():
        if key == "shell":
            data["shell"].update(value)
        else:
            data[key] = value
    return Capabilities.model_validate(data, strict=False)


def _entries(root: str):
    """(fd, name) of root and every directory and regular file beneath it (the fd valid for one step)."""
    import stat

    from mur import fswalk

    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        yield top, root
        for step in fswalk.walk(top):
            if step.kind == "leave" or not (stat.S_ISDIR(step.st.st_mode) or stat.S_ISREG(step.st.st_mode)):
                continue
            try:
                fd = os.open(step.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=step.dirfd)
            except OSError:
                continue
            try:
                yield fd, step.name
            finally:
                os.close(fd)
    finally:
        os.close(top)


def _processes_in(workdir: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if cwd == workdir or cwd.startswith(workdir + "/"):
                found.append(int(entry))
    return found


def assert_nothing_left(sb: ShellSandbox) -> None:
    """No cgroup, no process, no ACL entry for the session uid, no uid lease after close()."""
    if sb.cgroup is not None:
        leftovers = [d for d in sb.cgroup.dirs.values() if os.path.exists(d)]
        assert leftovers == [], f"cgroups left behind: {leftovers}"
    assert _processes_in(str(sb.workdir)) == [], "processes left running in the workdir"
    uid = sb.policy.run_as[0] if sb.policy is not None and sb.policy.run_as else 65534
    for fd, name in _entries(str(sb.workdir)):  # iteratively: a test's tools may leave any depth
        for attr in (access.ACCESS, access.DEFAULT):
            try:
                entries = access.decode(os.getxattr(fd, attr))
            except OSError:
                continue
            assert not any(t == access.USER and i == uid for t, _p, i in entries), f"ACL left on {name}"
    if sb.policy is not None and sb.policy.run_as is not None:
        assert not os.path.exists(f"/run/mur/uids/{uid}"), "uid lease left behind"


@contextlib.contextmanager
def serving(srv: socket.socket, handle: Callable[[socket.socket], None]) -> Iterator[socket.socket]:
    """Accept on a listening socket in a thread, ``handle(conn)`` each connection, until the block ends."""
    srv.settimeout(0.2)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                try:
                    handle(conn)
                except OSError:
                    pass

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        stop.set()
        thread.join(timeout=2)
        srv.close()


class HelloHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with ``hello <Host header>``."""

    def do_GET(self):  # noqa: N802
        body = f"hello {self.headers.get('Host')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass
