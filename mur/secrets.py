"""Credential-shaped environment names: the backstop that keeps secrets out of guests and shell tools.

The list is upstream's built-in credential strip (reference/upstream.md section 7) plus a few globs
for the common ``*_TOKEN`` / ``*_SECRET`` / ``*_PASSWORD`` shapes: a name matching any of these is
never handed to a WASM guest (even when declared in ``capabilities.env.allow``) nor to a shell tool.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase, translate

CREDENTIAL_NAMES = frozenset(
    {
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GOOGLE_API_KEY",
        "HUGGING_FACE_HUB_TOKEN",
        "NEXUS_API_KEY",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "KUBECONFIG",
        "NPM_TOKEN",
        "PYPI_TOKEN",
        "CARGO_REGISTRY_TOKEN",
    }
)

CREDENTIAL_GLOBS = (
    "AWS_*",
    "DOCKER_*",
    "*_API_KEY",
    "*_TOKEN",
    "*_SECRET",
    "*_SECRET_KEY",
    "*_PASSWORD",
    "*_ACCESS_KEY",
    "*_PRIVATE_KEY",
)


# one regex for all the globs, compiled at import: the capsule host compiles it once for every run it
# forks (fnmatch's own cache would compile each glob again in every run)
_CREDENTIAL_RE = re.compile("|".join(f"(?:{translate(g)})" for g in CREDENTIAL_GLOBS))


def matches_any(name: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """Case-sensitive glob match of an env var name against any pattern."""
    return any(fnmatchcase(name, p) for p in patterns)


def is_credential_name(name: str) -> bool:
    """Is this env var name credential-shaped (never exposed to a capsule)?"""
    upper = name.upper()
    return upper in CREDENTIAL_NAMES or _CREDENTIAL_RE.match(upper) is not None
