"""The env file written on the target, rendered for every reader: systemd's `EnvironmentFile=`, sh
(the image entrypoint) and `mur supervise` (read_env_file is the inverse of render_env_file). Where
the values come from (`--env`, `--env-file`, `.env`) is mur.resolve.env's, as for every command.
"""

from __future__ import annotations

from mur.resolve import env as dotenv


def render_env_file(env: dict[str, str] | tuple[tuple[str, str], ...]) -> bytes:
    """KEY="value" lines readable by systemd's EnvironmentFile=, sh and `mur supervise`."""
    return dotenv.render(env)


def read_env_file(text: str) -> dict[str, str]:
    """The inverse of render_env_file (the same grammar as a user's .env)."""
    return dotenv.parse(text, "env")
