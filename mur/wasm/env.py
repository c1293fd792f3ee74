"""The environment a WASM guest sees: never the host's, only what the manifest lets through.

Spec (capabilities.env.allow): a guest never inherits the host process's environment. A name in
``capabilities.env.allow`` is copied from the host when it is set there, unless it is
credential-shaped (``mur.secrets``: the same backstop shell tools get) or matches a
``capabilities.shell.strip_env`` glob. A declared-but-unset variable is silently omitted. On top
of that come the runtime's own ``MURMUR_*`` variables, which are the runtime's choice (e.g.
``MURMUR_INFERENCE_API_KEY`` for a driver) and so bypass the backstop, and win over a same-named
host variable.
"""

from __future__ import annotations

from typing import Mapping

from mur.secrets import is_credential_name, matches_any


def guest_env(
    env_allow: list[str],
    strip_env: list[str],
    host_env: Mapping[str, str],
    murmur_vars: Mapping[str, str],
) -> list[tuple[str, str]]:
    """Exactly the (name, value) pairs a guest may see, in a stable order."""
    out: dict[str, str] = {}
    for name in env_allow:
        if name in out or name in murmur_vars:
            continue
        if is_credential_name(name) or matches_any(name, list(strip_env)):
            continue
        value = host_env.get(name)
        if value is None:
            continue
        out[name] = value
    for name, value in murmur_vars.items():
        out[name] = str(value)
    return list(out.items())

