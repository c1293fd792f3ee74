"""The service environment: `--env KEY=VALUE`, `.env` files, and the env file written on the target.

Upstream's precedence: `--env` flags, else `--env-file`, else `.env` next to the manifest (they are
alternatives, not merged). The file on the target is rendered for both readers: systemd's
`EnvironmentFile=` and `mur supervise` (read_env_file is the inverse of render_env_file).
"""

from __future__ import annotations

import re
from pathlib import Path

from mur.errors import MurError

ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    """A .env file: KEY=VALUE lines; blank and # lines skipped; `export ` stripped; quotes removed."""
    out: dict[str, str] = {}
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise MurError("E-DEPLOY-001", f"{origin}:{i}: expected KEY=VALUE, got {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        _check_env(key, value, f"{origin}:{i}")
        out[key] = value
    return out


def _check_env(key: str, value: str, where: str) -> None:
    if not ENV_KEY.match(key):
        raise MurError("E-DEPLOY-001", f"{where}: '{key}' is not a valid environment variable name")
    if "\n" in value or "\r" in value or "\0" in value:
        raise MurError("E-DEPLOY-001", f"{where}: the value of {key} contains a newline or NUL, which an env file cannot carry")


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


def _quote_env(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return f'"{escaped}"'


def render_env_file(env: dict[str, str] | tuple[tuple[str, str], ...]) -> bytes:
    """KEY="value" lines readable by systemd's EnvironmentFile= and by `mur supervise`."""
    items = env.items() if isinstance(env, dict) else env
    return "".join(f"{k}={_quote_env(v)}\n" for k, v in items).encode()


def read_env_file(text: str) -> dict[str, str]:
    """The inverse of render_env_file (also accepts unquoted values)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, _, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        out[key.strip()] = value
    return out
