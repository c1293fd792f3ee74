"""Foreign errors are translated once, at their adapter, and the mapping is total: every paramiko/socket
error from every SSH primitive is E-DEPLOY-003 (never E-INTERNAL; the docker SDK's mapping, E-DEPLOY-010
for container operations, is tests/engine/test_engine_errors.py's); no SDK is used outside its adapter;
and mur/deploy has no import cycle."""

from __future__ import annotations

import ast
import re
import socket
from pathlib import Path

import pytest
from error_classes import instances

from mur.errors import MurError

MUR = Path(__file__).resolve().parents[2] / "mur"
DEPLOY = MUR / "deploy"


class FakeSSHClient:
    """A paramiko client whose connect or channel raises what it is given."""

    def __init__(self, connect_exc=None, channel_exc=None):
        self.connect_exc, self.channel_exc = connect_exc, channel_exc

    def load_host_keys(self, path):
        pass

    def set_missing_host_key_policy(self, policy):
        pass

    def connect(self, *a, **k):
        if self.connect_exc is not None:
            raise self.connect_exc

    def close(self):
        pass

    def get_transport(self):
        return self

    def is_active(self):
        return True

    def open_session(self, *a, **k):
        raise self.channel_exc

    open_channel = open_session

    def open_sftp(self):
        raise self.channel_exc

    def get_exception(self):
        return None


def ssh_errors() -> list[BaseException]:
    import paramiko
    import paramiko.ssh_exception

    errors = [e for e in instances(paramiko.ssh_exception) if not isinstance(e, paramiko.BadHostKeyException)]
    errors.append(paramiko.BadHostKeyException("vm", paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()))
    return [*errors, socket.timeout("timed out"), EOFError(), OSError(104, "reset")]


def test_every_ssh_primitive_translates_every_transport_error(tmp_path):
    from mur.deploy.targets.ssh import SSHTarget

    for exc in ssh_errors():
        t = SSHTarget("vm", known_hosts=str(tmp_path / "kh"), client_factory=lambda e=exc: FakeSSHClient(channel_exc=e))
        t._uid, t._home, t._user = 0, "/root", "root"
        for name, call in {"run": lambda: t.run("true"), "put_file": lambda: t.put_file(b"x", "/tmp/x"),
                           "stream": lambda: t.stream("true", lambda b: None)}.items():
            with pytest.raises(MurError) as err:
                call()
            assert err.value.code == "E-DEPLOY-003", (name, exc)
        with t.open_port(80) as (host, port):  # a refused channel drops that client, nothing escapes
            with socket.create_connection((host, port), timeout=5) as s:
                assert s.recv(10) == b""


def test_every_connect_error_is_translated(tmp_path):
    from mur.deploy.targets.ssh import SSHTarget

    for exc in ssh_errors():
        with pytest.raises(MurError) as err:
            SSHTarget("vm", known_hosts=str(tmp_path / "kh"), connect_budget=0.01,
                      client_factory=lambda e=exc: FakeSSHClient(connect_exc=e))
        assert err.value.code in ("E-DEPLOY-003", "E-DEPLOY-009"), exc


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_sdks_are_used_only_by_their_adapters():
    """The docker SDK nowhere in mur but mur.engine.sdk; paramiko nowhere in mur/deploy but targets/ssh.py."""
    adapters = {"docker": (MUR, MUR / "engine" / "sdk.py"), "paramiko": (DEPLOY, DEPLOY / "targets" / "ssh.py")}
    for sdk, (scope, owner) in adapters.items():
        for path in scope.rglob("*.py"):
            used = {n for n in _imports(path) if n == sdk or n.startswith(sdk + ".")}
            assert not used or path == owner, f"{path.relative_to(MUR)} imports {sorted(used)}"
    for path in MUR.rglob("*.py"):
        if not path.is_relative_to(MUR / "engine"):
            assert not re.search(r"\bengine\.client\b", path.read_text()), \
                f"{path.relative_to(MUR)} reaches into the docker client"


def test_no_import_cycle_in_mur_deploy():
    modules = {}
    for path in DEPLOY.rglob("*.py"):
        rel = path.relative_to(DEPLOY.parent.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = path
    graph = {m: {n for n in _imports(p) if n in modules and n != m} for m, p in modules.items()}
    # a package's own __init__ is imported by its submodules implicitly: not an edge back
    seen, stack = set(), []

    def visit(m: str) -> None:
        if m in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
        if m in seen:
            return
        stack.append(m)
        for n in graph[m]:
            visit(n)
        stack.pop()
        seen.add(m)

    for m in graph:
        visit(m)
    # and layering: a provider never imports another provider; plan never imports apply; steps is a leaf
    assert "mur.deploy.providers.host" not in graph["mur.deploy.providers.docker"]
    assert "mur.deploy.providers.docker" not in graph["mur.deploy.providers.host"]
    assert "mur.deploy.apply" not in graph["mur.deploy.plan"]
    assert not {n for n in graph["mur.deploy.steps"] if n.startswith("mur.deploy")}


def test_a_channel_open_the_host_never_answers_is_a_silent_link():
    """paramiko's 'Timeout opening channel.' (the connect deadline can come before the watchdog's)
    reads as the silence it is, naming the step; other failures keep their own text."""
    import paramiko

    from mur.deploy.targets.ssh import SSHTarget

    from mur.deploy.deadlines import current as current_deadlines

    target = SSHTarget.__new__(SSHTarget)  # no connection: only the translation of its failures
    target.host, target.ssh_user, target.port = "host.invalid", "root", 22
    target.deadlines, target.dead, target.doing = current_deadlines(), None, "upload release 1"
    silent = target._lost("SSH command", paramiko.SSHException("Timeout opening channel."))
    assert silent.code == "E-DEPLOY-003"
    assert "the link went silent during upload release 1 (SSH command)" in silent.message
    refused = target._lost("SSH command", paramiko.SSHException("Administratively prohibited"))
    assert "went silent" not in refused.message and "Administratively prohibited" in refused.message
