"""Image references (`[host[:port]/]path[:tag]`): checked here so a typo is a clear error, not an engine one."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mur.errors import MurError

_DOMAIN = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])(?:\.(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]))*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_REF = re.compile(rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?$")


@dataclass(frozen=True)
class Reference:
    registry: str  # "" when the reference names no registry (Docker would use docker.io)
    repository: str  # with the registry, as the engine wants it
    tag: str

    def __str__(self) -> str:
        return f"{self.repository}:{self.tag}"


def parse_ref(ref: str) -> Reference:
    """A checked reference (E-IMG-004 otherwise); the tag defaults to `latest`."""
    m = _REF.match(ref or "")
    domain = m.group("domain") if m else None
    if m and domain and not ("." in domain or ":" in domain or domain == "localhost"):
        # `name/sub` is a path on Docker Hub, not a host: re-read it that way
        m = _REF.match(f"docker.io/{ref}")
        domain = None if m else domain
    if not m:
        raise MurError("E-IMG-004", f"invalid image reference {ref!r}",
                       "use [HOST[:PORT]/]NAME[:TAG] with a lowercase NAME, e.g. 127.0.0.1:5000/hello:0.1.0")
    path = m.group("path")
    repo = f"{domain}/{path}" if domain else path
    return Reference(registry=domain or "", repository=repo, tag=m.group("tag") or "latest")


def default_tag(name: str, version: str) -> str:
    """`mur-<capsule name>:<capsule version>`, lowercased into what a reference allows."""
    clean = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._") or "capsule"
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", version).lstrip(".-") or "latest"
    return f"mur-{clean}:{tag[:128]}"
