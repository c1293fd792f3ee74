"""Where `mur send / watch / cancel` send their requests (mur.remote.reach): a URL as given, or a
deployment's endpoint, an SSH one through a forward opened for the command and closed after it (the
real SSH path runs against an sshd container in integration/deploy/test_remote_access.py)."""

from __future__ import annotations

import contextlib
import socket

import pytest

from mur.deploy.state import Deployment, DeploymentStore
from mur.deploy.targets import TargetSpec
from mur.errors import MurError
from mur.remote.reach import Named, endpoint, lookup

DEP = "dep_0196a0a0a0a07000800000000000abcd"
SPEC = TargetSpec("ssh", host="203.0.113.7", port=2222, user="deployer", key_file="/k", known_hosts="/kh")


class FakeTarget:
    """What mur.deploy.targets.connect returns, as far as reach uses it: a port seam and close()."""

    def __init__(self, log: list):
        self.log = log
        with socket.socket() as s:  # a port nothing listens on (the forward's local end, here a dead one)
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]

    @contextlib.contextmanager
    def open_port(self, port: int):
        self.log.append(("open", port))
        try:
            yield "127.0.0.1", self.port
        finally:
            self.log.append(("closed", port))

    def close(self) -> None:
        self.log.append(("disconnected",))


def connector(log: list):
    def connect(spec, **kw):
        log.append(("connect", spec, kw["connect_budget"]))
        return FakeTarget(log)

    return connect


def ssh_dep(bind: str = "127.0.0.1", url: str = "http://127.0.0.1:41000") -> Deployment:
    return Deployment(DEP, "ssh", SPEC, url=url, service_port=8123, bind=bind, token_file="/t")


def test_lookup_by_id_prefix_or_recorded_url(home):
    DeploymentStore().save(ssh_dep())
    for address in (DEP, DEP[:10], DEP[4:14], "http://127.0.0.1:41000/", "127.0.0.1:41000"):
        named = lookup(address)
        assert named.deployment is not None and named.deployment.deployment_id == DEP, address
        assert named.url == "http://127.0.0.1:41000"
    assert lookup("http://127.0.0.1:9") == Named("http://127.0.0.1:9")
    assert lookup("localhost:9") == Named("localhost:9")


def test_a_word_that_names_nothing_is_an_error_not_a_url(home):
    """`dep_ffff` or a capsule name with no deployment used to become http://dep_ffff:80 and fail as
    'cannot reach the capsule: Name or service not known'; an ambiguous prefix was read as a URL too."""
    DeploymentStore().save(ssh_dep())
    DeploymentStore().save(Deployment(DEP[:-4] + "ffff", "local", TargetSpec("local"), url="http://127.0.0.1:9"))
    for word, says in (("dep_ffff", "is no deployment id"), ("hello", "is no deployment id"),
                       (DEP[:12], "ambiguous prefix")):
        with pytest.raises(MurError) as err:
            lookup(word)
        assert err.value.code == "E-DEPLOY-008" and says in err.value.message, word


def test_a_loopback_ssh_deployment_is_reached_through_a_forward_closed_after_the_block():
    log: list = []
    with endpoint(Named("http://127.0.0.1:41000", ssh_dep()), connect=connector(log)) as url:
        assert url.startswith("http://127.0.0.1:") and url != "http://127.0.0.1:41000"
        assert log == [("connect", SPEC, 15.0), ("open", 8123)]
    assert log[2:] == [("closed", 8123), ("disconnected",)]


def test_a_deployment_with_a_front_is_reached_at_the_fronts_port_not_its_services():
    """A fleet target's service port is private and restarts at each release (mur.deploy.fronted):
    a send through it during a switch would reach a service that is restarting, or one draining."""
    log: list = []
    dep = ssh_dep()
    dep.extra["front"] = {"port": 9000, "bind": "127.0.0.1"}
    with endpoint(Named("http://127.0.0.1:41000", dep), connect=connector(log)):
        assert log[1] == ("open", 9000)
    assert dep.client_port == 9000 and ssh_dep().client_port == 8123


def test_the_forward_closes_when_the_command_fails_or_is_interrupted():
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        log: list = []
        with pytest.raises(type(exc)), endpoint(Named("https://127.0.0.1:41000", ssh_dep()), connect=connector(log)) as url:
            assert url.startswith("https://127.0.0.1:") and url != "https://127.0.0.1:41000"
            raise exc
        assert log[-2:] == [("closed", 8123), ("disconnected",)]


def test_a_published_deployment_is_called_at_its_url_when_it_answers_else_over_ssh():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        log: list = []
        with endpoint(Named(url, ssh_dep("0.0.0.0", url)), connect=connector(log)) as got:
            assert got == url and log == []
    notes: list = []
    log = []
    with endpoint(Named(url, ssh_dep("0.0.0.0", url)), note=notes.append, connect=connector(log)) as got:
        assert got != url and log[:2] == [("connect", SPEC, 15.0), ("open", 8123)]
    assert notes == [f"{url} does not answer from here (a firewall?); reaching {DEP} over SSH "
                     "(deployer@203.0.113.7:2222) instead"]


def test_urls_and_other_providers_are_called_as_they_are():
    log: list = []
    local = Deployment(DEP, "local", TargetSpec("local"), url="http://127.0.0.1:5000", service_port=5000)
    for named in (Named("http://example.test:1"), Named(local.url, local)):
        with endpoint(named, connect=connector(log)) as url:
            assert url == named.url
    assert log == []


def test_send_names_the_deployment_in_its_errors_not_the_forwards_port(home, monkeypatch, cli):
    """Through the forward nothing listens (the fake's dead port): the error names what the user gave."""
    import mur.deploy.targets as targets

    DeploymentStore().save(ssh_dep())
    log: list = []
    monkeypatch.setattr(targets, "connect", connector(log))
    code, out, err = cli("send", DEP[:12], "hi", "--token", "t")
    assert code == 1 and err.startswith(f"error[E-A2A-001]: {DEP[:12]}: cannot reach the capsule"), err
    assert f"mur deploy status {DEP[:12]}" in err
    assert log[-2:] == [("closed", 8123), ("disconnected",)]


def test_a_deployment_that_does_not_answer_is_named_as_given_with_its_status_command(home, cli):
    """A stopped local deployment named by its capsule name: the error names it so and points at
    `mur deploy status NAME`, not at `mur run`'s URL (the hint for a URL nobody recorded)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    DeploymentStore().save(Deployment(DEP, "local", TargetSpec("local"), name="hello", status="stopped",
                                      url=f"http://127.0.0.1:{port}", service_port=port))
    code, out, err = cli("send", "hello", "hi")
    assert code == 1 and err.startswith("error[E-A2A-001]: hello: cannot reach the capsule"), err
    assert "hint: is it running? `mur deploy status hello` checks it" in err
