"""The service environment: `--env KEY=VALUE`, `.env` files, and the env file written on the target.

Upstream's precedence: `--env` flags, else `--env-file`, else `.env` next to the manifest (they are
alternatives, not merged). Files are read with the one grammar of mur.resolve.env (the same as
`mur run`); the file on the target is rendered for every reader: systemd's `EnvironmentFile=`, sh
(the image entrypoint) and `mur supervise` (read_env_file is the inverse of render_env_file).
"""

from __future__ import annotations

from pathlib import Path

from mur.errors import MurError
from mur.resolve import env as dotenv


def parse_env_args(entries: list[str]) -> dict[str, str]:
    """`--env KEY=VALUE` entries (split on the first `=`, empty value allowed)."""
    out: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise MurError("E-DEPLOY-001", f'--env value "{entry}" must be KEY=VALUE')
        _check_env(key, value, "--env")
        out[key] = value
    return out


def parse_env_text(text: str, origin: str) -> dict[str, str]:
    """A .env file, in the one grammar every command reads (mur.resolve.env)."""
    return dotenv.parse(text, origin)


def _check_env(key: str, value: str, where: str) -> None:
    try:
        dotenv.check_key(key)
        dotenv.check_value(key, value)
    except dotenv.EnvSyntaxError as exc:
        raise MurError("E-DEPLOY-001", f"{where}: {exc}") from None


def resolve_env(env_args: list[str], env_file: Path | None, manifest_dir: Path) -> tuple[dict[str, str], str]:
    """(env, where it came from): --env flags, else --env-file, else .env beside the manifest."""
    if env_args:
        return parse_env_args(env_args), "--env"
    path = env_file if env_file is not None else manifest_dir / ".env"
    if env_file is None and not path.is_file():
        return {}, "none"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise MurError("E-IO-001", f"cannot read env file {path}: {reason}") from exc
    return parse_env_text(text, str(path)), str(path)


def render_env_file(env: dict[str, str] | tuple[tuple[str, str], ...]) -> bytes:
    """KEY="value" lines readable by systemd's EnvironmentFile=, sh and `mur supervise`."""
    return dotenv.render(env)


def read_env_file(text: str) -> dict[str, str]:
    """The inverse of render_env_file (the same grammar as a user's .env)."""
    return dotenv.parse(text, "env")
