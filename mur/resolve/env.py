"""The one `.env` grammar: `mur run`, `mur deploy`, `mur image` and `mur export` read a file alike.

A line is blank, a comment (`#` first), or `[export ]KEY=VALUE`:

- KEY is a shell name (`[A-Za-z_][A-Za-z0-9_]*`); whitespace around it and around `=` is ignored.
- An unquoted VALUE is stripped; ` #` (a `#` after whitespace) starts a comment, so
  `A=abc # note` is `abc` while `A=abc#note` is `abc#note`.
- `'single'` is literal. In `"double"` a backslash escapes only `\\ \" \$ \``, as in a POSIX shell
  and in systemd's `EnvironmentFile=`; before anything else it is kept (`"a\nb"` is 4 characters).
  After the closing quote only whitespace or a comment may follow.
- No `${VAR}` expansion: the deployed service must see exactly what `mur run` saw, and the
  operator's shell is not the target's environment.
- A value never holds a newline or NUL after decoding (a systemd `EnvironmentFile=` cannot carry one).

Anything else (no `=`, a bad name, an unclosed quote, text after a closing quote) is E-IO-003 naming
the file and line. `render` writes a file this grammar reads back unchanged; systemd's
`EnvironmentFile=` reads the same bytes to the same values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from mur.errors import MurError

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ESCAPED = '\\"$`'  # what a backslash escapes inside double quotes (sh, systemd)


class EnvSyntaxError(ValueError):
    """One malformed line: its reason (the caller adds where)."""


def parse(text: str, origin: str) -> dict[str, str]:
    """KEY -> value for a `.env` text; `origin` names the file in errors (E-IO-003)."""
    out: dict[str, str] = {}
    # Lines end at \n only: str.splitlines() would also split inside a value at \f, \v, \x1c-\x1e, \x85, \u2028.
    for number, raw in enumerate(text.split("\n"), 1):
        raw = raw.removesuffix("\r")
        try:
            item = parse_line(raw)
        except EnvSyntaxError as exc:
            raise MurError(
                "E-IO-003",
                f"{origin}:{number}: {exc}",
                hint="a .env line is KEY=VALUE (see docs/run.md, 'The .env file')",
            ) from None
        if item is not None:
            out[item[0]] = item[1]
    return out


def parse_line(raw: str) -> tuple[str, str] | None:
    """(key, value) of one line, None for a blank or comment line; EnvSyntaxError when malformed."""
    line = raw.strip()
    if not line or line.startswith("#"):
        return None
    if line.startswith("export ") or line.startswith("export\t"):
        line = line[len("export"):].lstrip()
    key, sep, rest = line.partition("=")
    key = key.strip()
    if not sep:
        raise EnvSyntaxError(f"expected KEY=VALUE, got {raw!r}")
    check_key(key)
    value = _value(rest.lstrip())
    check_value(key, value)
    return key, value


def check_key(key: str) -> None:
    """EnvSyntaxError unless `key` is a shell variable name."""
    if not KEY.match(key):
        raise EnvSyntaxError(f"'{key}' is not a valid environment variable name")


def check_value(key: str, value: str) -> None:
    """EnvSyntaxError when a value could not survive an env file (newline, carriage return, NUL)."""
    if "\n" in value or "\r" in value or "\0" in value:
        raise EnvSyntaxError(f"the value of {key} contains a newline or NUL, which an env file cannot carry")


def _value(rest: str) -> str:
    if rest.startswith("'"):
        end = rest.find("'", 1)
        if end < 0:
            raise EnvSyntaxError("unclosed single quote")
        _only_comment_after(rest[end + 1:])
        return rest[1:end]
    if rest.startswith('"'):
        out: list[str] = []
        i = 1
        while i < len(rest):
            ch = rest[i]
            if ch == "\\" and i + 1 < len(rest):
                nxt = rest[i + 1]
                out.append(nxt if nxt in _ESCAPED else "\\" + nxt)
                i += 2
                continue
            if ch == '"':
                _only_comment_after(rest[i + 1:])
                return "".join(out)
            out.append(ch)
            i += 1
        raise EnvSyntaxError("unclosed double quote")
    comment = re.search(r"\s#", rest)
    return (rest[: comment.start()] if comment else rest).strip()


def _only_comment_after(tail: str) -> None:
    tail = tail.strip()
    if tail and not tail.startswith("#"):
        raise EnvSyntaxError(f"unexpected text after the closing quote: {tail!r}")


def render(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> bytes:
    """KEY="value" lines that `parse` and systemd's `EnvironmentFile=` both read back unchanged."""
    items = env.items() if isinstance(env, Mapping) else env
    lines = []
    for key, value in items:
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
        lines.append(f'{key}="{escaped}"\n')
    return "".join(lines).encode()


# --- where a command's environment comes from ---------------------------------------------------
# Upstream's precedence for deploy, image and export: `--env` flags, else `--env-file`, else `.env`
# next to the manifest (alternatives, not merged).

def parse_env_args(entries: list[str]) -> dict[str, str]:
    """`--env KEY=VALUE` entries (split on the first `=`, empty value allowed)."""
    out: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise MurError("E-DEPLOY-001", f'--env value "{entry}" must be KEY=VALUE', "e.g. --env GREETING=Hi")
        _check_env(key, value, "--env")
        out[key] = value
    return out


def _check_env(key: str, value: str, where: str) -> None:
    try:
        check_key(key)
        check_value(key, value)
    except EnvSyntaxError as exc:
        raise MurError("E-DEPLOY-001", f"{where}: {exc}", "docs/run.md gives the .env grammar (KEY=VALUE per line)") from None


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
    return parse(text, str(path)), str(path)
