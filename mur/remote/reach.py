"""Where `mur send / watch / cancel` send their requests: a URL as given, or a deployment's endpoint.

A deployment on an SSH host listens on the host's loopback unless it was deployed with --publish;
its recorded URL (`http://127.0.0.1:<port>`) is the local end of the `ssh -N -L` line deploy prints
for other clients, and nothing answers there until someone runs that line. Named by its id (or by
that URL), such a deployment is reached the way `mur deploy status` checks it:

* a new SSH connection to the recorded target, the host key verified against the recorded
  known_hosts exactly as deploy did (mur.deploy.targets.connect; an unknown or changed key is
  refused, never recorded here);
* the target's port seam (`Target.open_port`): a listening socket on 127.0.0.1:<ephemeral> here
  whose connections each become a paramiko direct-tcpip channel to 127.0.0.1:<service port> there;
* both closed when the block ends, returns, fails or is interrupted (Ctrl-C): no `ssh` process,
  no tunnel outlives the command.

A published SSH deployment (bound to 0.0.0.0) is called at its URL when that answers from here;
when a firewall keeps it from answering, the call goes through the SSH forward instead (and says
so), because `status` checks the service from the host itself and says it answers.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import Callable, Iterator
from urllib.parse import urlsplit

from mur.deploy.state import Deployment, DeploymentStore, UnknownDeployment, resolve_id
from mur.errors import MurError

CONNECT_BUDGET = 15.0  # seconds of SSH connection retries before the command fails (deploy takes 30)
DIRECT_PROBE_SECS = 3.0  # how long a published URL gets to accept a TCP connection before SSH is used


@dataclass(frozen=True)
class Named:
    """What the user's address names: the URL to call, and the deployment behind it (if any)."""

    url: str
    deployment: Deployment | None = None


def lookup(address: str, store: DeploymentStore | None = None) -> Named:
    """The deployment `address` names (an id, a unique id prefix, NAME@TARGET, or a URL a deployment
    recorded), else the address itself as the URL; E-DEPLOY-008 for a word that names none of them
    (no scheme, no port: it would only have been tried as http://WORD:80)."""
    records = (store or DeploymentStore()).load()
    wanted = address.strip().rstrip("/")
    urls = {wanted} if "://" in wanted else {f"http://{wanted}", f"https://{wanted}"}
    for dep in records:
        if dep.url and dep.url.rstrip("/") in urls:
            return Named(dep.url, dep)
    if ":" not in wanted:  # no scheme, no port: not a capsule's URL (`mur run` prints localhost:PORT)
        try:
            dep = resolve_id(records, address)
        except UnknownDeployment:
            raise MurError("E-DEPLOY-008", f"'{address}' is no deployment id, NAME@TARGET or capsule name here, "
                           "and no URL (a capsule's URL has a port: localhost:PORT)",
                           "list deployments with `mur deploy ls`; a `mur run` prints its URL "
                           "(murmur: url localhost:<port>)") from None
        return Named(dep.url, dep)
    return Named(address)


def needs_forward(dep: Deployment | None) -> bool:
    """True when the deployment's endpoint is only reachable through its SSH host."""
    return dep is not None and dep.provider == "ssh" and bool(dep.service_port)


def _answers(url: str, timeout: float = DIRECT_PROBE_SECS) -> bool:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def endpoint(named: Named, note: Callable[[str], None] = lambda _t: None,
             connect: Callable[..., object] | None = None) -> Iterator[str]:
    """The URL to call while the block runs: `named.url`, or the local end of a forward over SSH to
    the deployment's service port (opened here, closed when the block ends)."""
    dep = named.deployment
    if not needs_forward(dep):
        yield named.url
        return
    assert dep is not None
    if dep.bind != "127.0.0.1":  # published: its own address, when it answers from here
        if _answers(named.url):
            yield named.url
            return
        note(f"{named.url} does not answer from here (a firewall?); reaching {dep.deployment_id} over SSH "
             f"({dep.target.label}) instead")
    if connect is None:
        from mur.deploy.targets import connect as connect_target

        connect = connect_target
    target = connect(dep.target, note=note, connect_budget=CONNECT_BUDGET)
    try:
        # the front's port when there is one: through a release switch it is the port that answers
        with target.open_port(int(dep.client_port or 0)) as (host, port):  # type: ignore[attr-defined]
            scheme = urlsplit(named.url).scheme or "http"
            yield f"{scheme}://{host}:{port}"
    finally:
        target.close()  # type: ignore[attr-defined]
