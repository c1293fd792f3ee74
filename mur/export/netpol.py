"""A NetworkPolicy from `capabilities.network.allow` (pure).

What a NetworkPolicy can say is addresses and ports, never host names, so each form of allow
entry becomes what comes closest (docs/kubernetes.md, "What a NetworkPolicy cannot express"):

  * an IP literal (`http://10.0.0.5:8000`)  -> that address (/32 or /128) on that port;
  * a host name (`https://api.example.com`) -> any address but link-local (cloud metadata) on that
    port, plus DNS to the cluster's resolver; mur's runtime still checks the host name of every
    request it makes itself (WASI HTTP from tools and drivers);
  * a bare host (`api.example.com`, every port) -> as above, every port;
  * loopback (`127.0.0.1:8765`, `localhost`)  -> nothing: traffic inside the pod never meets a policy.

No entry at all gives an empty egress list: the pod reaches nothing, not even DNS.
"""

from __future__ import annotations

from typing import Any

from mur.manifest.network import AllowEntry, ip_literal

ANYWHERE = ({"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}},
            {"ipBlock": {"cidr": "::/0", "except": ["fe80::/10"]}})
DNS = {
    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


def _rule(to: list[dict[str, Any]], ports: set[int] | None) -> dict[str, Any]:
    rule: dict[str, Any] = {"to": to}
    if ports is not None:
        rule["ports"] = [{"protocol": "TCP", "port": p} for p in sorted(ports)]
    return rule


def _merge(ports: dict[str, set[int] | None], key: str, port: int | None) -> None:
    if key in ports and ports[key] is None:
        return  # already every port
    if port is None:
        ports[key] = None
    else:
        ports.setdefault(key, set()).add(port)  # type: ignore[union-attr]


def egress(entries: list[AllowEntry]) -> tuple[list[dict[str, Any]], list[str]]:
    """(egress rules, notes saying what each entry became)."""
    by_ip: dict[str, set[int] | None] = {}
    named: dict[str, set[int] | None] = {}
    notes: list[str] = []
    for e in entries:
        ip = ip_literal(e.host)
        port = e.ports()
        where = f"port {port}" if port is not None else "every port"
        if (ip is not None and ip.is_loopback) or e.host == "localhost":
            notes.append(f"{e.raw}: loopback stays inside the pod; no policy rule")
        elif ip is not None:
            cidr = f"{ip}/{32 if ip.version == 4 else 128}"
            _merge(by_ip, cidr, port)
            notes.append(f"{e.raw}: {cidr}, {where}")
        else:
            _merge(named, "*", port)
            notes.append(f"{e.raw}: a policy cannot name a host, so any non-link-local address on {where}")
    rules = [_rule([{"ipBlock": {"cidr": cidr}}], ports) for cidr, ports in sorted(by_ip.items())]
    if named:
        rules.append(_rule(list(ANYWHERE), named["*"]))
        rules.insert(0, DNS)
    return rules, notes


def network_policy(name: str, labels: dict[str, str], selector: dict[str, str], port: int,
                   entries: list[AllowEntry]) -> tuple[dict[str, Any], list[str]]:
    """Ingress: the A2A port from pods of the same namespace. Egress: the allow list, as above."""
    rules, notes = egress(entries)
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": port}]}],
            "egress": rules,
        },
    }
    return policy, notes
