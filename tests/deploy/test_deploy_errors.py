"""Foreign errors are translated once, at their adapter, and the mapping is total: every docker SDK
and transport error from every engine operation is E-DEPLOY-010, every paramiko/socket error from
every SSH primitive is E-DEPLOY-003 (never E-INTERNAL); no SDK is used outside its adapter; and
mur/deploy has no import cycle."""

from __future__ import annotations

import ast
import inspect
import re
import socket
from pathlib import Path

import pytest

from mur.errors import MurError

DEPLOY = Path(__file__).resolve().parents[2] / "mur" / "deploy"


def instances(module, base=Exception) -> list[BaseException]:
    """One instance of every exception class a module defines (dummy constructor arguments)."""
    out = []
    for _name, cls in inspect.getmembers(module, inspect.isclass):
        if not issubclass(cls, base) or cls.__module__ != module.__name__:
            continue
        params = [p for p in inspect.signature(cls.__init__).parameters.values()
                  if p.name != "self" and p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
        try:
            out.append(cls(*["x"] * len(params)))
        except Exception:  # noqa: BLE001 - some want typed arguments
            out.append(cls.__new__(cls))
    return out


class Raiser:
    """Every attribute is another Raiser; calling one raises `exc` (an SDK whose calls all fail)."""

    def __init__(self, exc: BaseException, found: bool = False):
        self.exc, self.found = exc, found

    def __getattr__(self, name):
        if self.found and name == "containers":
            return _Found(self.exc)
        return Raiser(self.exc)

    def __call__(self, *a, **k):
        raise self.exc

    def __iter__(self):  # a lazy SDK property (container.image.tags) fails when read
        raise self.exc


class _Found:
    """containers.get finds a container whose every operation fails."""

    def __init__(self, exc):
        self.exc = exc

    def get(self, name):
        c = Raiser(self.exc)
        c.__dict__.update(status="running", labels={}, attrs={})
        return c

    def __getattr__(self, name):
        return Raiser(self.exc)


def docker_errors() -> list[BaseException]:
    import docker.errors
    import requests.exceptions

    return [*instances(docker.errors), requests.exceptions.ConnectionError("refused"),
            requests.exceptions.ReadTimeout("slow"), OSError(2, "gone")]


def engine_calls(tmp_path):
    from mur.deploy.targets.docker import Secret

    ctx = tmp_path / "ctx"
    ctx.mkdir(exist_ok=True)
    return {
        "info": lambda e: e.info(), "run_once": lambda e: e.run_once("i", ["true"], {}),
        "container": lambda e: e.container("c"),
        "create": lambda e: e.create("i", "c", {}, {}, {}, {"/a/b": Secret(b"x", 10001, 10001)}),
        "start": lambda e: e.start("c"),
        "stop": lambda e: e.stop("c"), "remove": lambda e: e.remove("c"), "rename": lambda e: e.rename("c", "d"),
        "exec": lambda e: e.exec("c", ["true"]), "stdout_since": lambda e: e.stdout_since("c", 0),
        "put_file": lambda e: e.put_file("c", "/a/b", b"x", 0o600), "images": lambda e: e.images("r"),
        "untag": lambda e: e.untag("r"), "logs": lambda e: e.logs("c"), "labelled": lambda e: e.labelled("l"),
    }


def test_every_engine_operation_translates_every_docker_error(tmp_path):
    from docker.errors import ImageNotFound, NotFound

    from mur.deploy.targets.docker import DockerEngine

    public = {n for n, v in inspect.getmembers(DockerEngine, inspect.isfunction) if not n.startswith("_")}
    calls = engine_calls(tmp_path)
    assert public == set(calls), "a new engine operation needs a line here"
    for exc in docker_errors():
        for found in (False, True):
            engine = DockerEngine(client=Raiser(exc, found))
            for name, call in calls.items():
                try:
                    result = call(engine)
                except MurError as err:
                    assert err.code == "E-DEPLOY-010", (name, exc)
                    continue
                # only "not there" may come back as a value (and a container whose image is gone), never a raw error
                gone_image = name == "container" and found and result.image_tags == ()
                assert gone_image or (isinstance(exc, (NotFound, ImageNotFound)) and result in (None, False, (1, ""), "")), \
                    (name, exc, result)


def test_the_engine_connection_is_translated(monkeypatch):
    import docker

    from mur.deploy.targets.docker import DockerEngine

    def refuse(**kw):
        raise docker.errors.DockerException("Error while fetching server API version: connection refused")

    monkeypatch.setattr(docker, "from_env", refuse)
    with pytest.raises(MurError) as err:
        DockerEngine()
    assert err.value.code == "E-DEPLOY-010" and "connection refused" in err.value.message


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
    adapters = {"docker": DEPLOY / "targets" / "docker.py", "paramiko": DEPLOY / "targets" / "ssh.py"}
    for path in DEPLOY.rglob("*.py"):
        for sdk, owner in adapters.items():
            used = {n for n in _imports(path) if n == sdk or n.startswith(sdk + ".")}
            assert not used or path == owner, f"{path.relative_to(DEPLOY)} imports {sorted(used)}"
        if path != adapters["docker"]:
            assert not re.search(r"\bengine\.client\b", path.read_text()), \
                f"{path.relative_to(DEPLOY)} reaches into the docker client"


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
