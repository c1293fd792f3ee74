"""Reading `murmur.yaml` text into plain Python values, with errors users can act on.

Shared by both parsers: YAML syntax errors become E-MAN-002 with line and column; file problems
become E-IO-*. Type names in messages are YAML's (null, boolean, number, string, sequence, mapping),
as upstream prints them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from mur.errors import MurError
from mur.paths import MANIFEST_FILENAME


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (a silent last-one-wins hides mistakes)."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError as exc:
            raise yaml.constructor.ConstructorError(
                None, None, "found an unhashable mapping key", key_node.start_mark
            ) from exc
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# YAML 1.2 core-schema scalars, as upstream's serde_yaml reads them: only true/false are booleans
# (PyYAML's YAML 1.1 default would turn `yes`, `no`, `on`, `off` into booleans), no sexagesimal or
# `1_000` numbers, and no implicit timestamps (`version: 2024-01-01` is the string "2024-01-01") or
# `=` values. Only null and the `<<` merge key keep PyYAML's resolvers.
_KEEP = ("tag:yaml.org,2002:null", "tag:yaml.org,2002:merge", "tag:yaml.org,2002:yaml")
_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag in _KEEP]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+.0123456789"),
)

# A manifest is small. Aliases let a few lines expand into billions of nodes ("billion laughs") or
# into a cycle; both are refused before anything walks the document.
MAX_NODES = 100_000


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text)


def _construct_bool(loader: _Loader, node: yaml.ScalarNode) -> bool:
    return loader.construct_scalar(node).lower() == "true"


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)


_UNPRINTABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)} | {
    0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x85: "\\x85", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def one_line(text: str) -> str:
    """`text` with control characters and line breaks escaped, so a diagnostic stays one line."""
    return text.translate(_UNPRINTABLE)


def single_line_error(err: MurError) -> MurError:
    """The same error with its message and hint made one line each (values from YAML may hold \\n)."""
    message, hint = one_line(err.message), one_line(err.hint) if err.hint else err.hint
    if (message, hint) == (err.message, err.hint):
        return err
    clean = MurError(err.code, message, hint)
    clean.__cause__ = err.__cause__
    return clean


def naming_file(err: MurError, shown: str) -> MurError:
    """`err` with its leading `murmur.yaml:` replaced by the file the user actually gave (`-m m.yaml`)."""
    prefix = f"{MANIFEST_FILENAME}:"
    if shown == MANIFEST_FILENAME or not err.message.startswith(prefix):
        return err
    named = MurError(err.code, one_line(shown) + err.message[len(MANIFEST_FILENAME):], err.hint)
    named.__cause__ = err.__cause__
    return named


# YAML 1.1's other booleans (PyYAML's default; many YAML tutorials use them). Read as YAML 1.2 they
# are plain strings, so a boolean field given one is a type error; the hint says why.
_YAML11_TRUE = ("yes", "y", "on")
_YAML11_FALSE = ("no", "n", "off")


def mistake_hint(path: str, expected: str, value: Any) -> str | None:
    """A hint for the common YAML slips behind a type error: an unquoted number, `yes`/`no`."""
    leaf = path.rsplit(".", 1)[-1].split("[", 1)[0] or path
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # A float (`1.0`) is almost always a version; an integer only where a number reads naturally.
    if expected == "string" and number and (isinstance(value, float) or leaf.endswith(("version", "name"))):
        return f'quote it, e.g. {leaf}: "{value}" (unquoted, YAML reads {value} as a number)'
    if expected == "boolean" and isinstance(value, str) and value.strip().lower() in _YAML11_TRUE + _YAML11_FALSE:
        meant = "true" if value.strip().lower() in _YAML11_TRUE else "false"
        return f"write {leaf}: {meant} (mur reads YAML 1.2, where only true and false are booleans)"
    return None


def invalid_type(path: str, expected: str, value: Any) -> MurError:
    """E-MAN-003 for a field of the wrong type, with a hint when the slip is a common one."""
    return MurError(
        "E-MAN-003",
        f"{MANIFEST_FILENAME}: field '{path}' has invalid type (expected {expected}, got {type_name(value)})",
        mistake_hint(path, expected, value),
    )


def type_name(value: Any) -> str:
    """YAML's name for a value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "sequence"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def _check_graph(root: Any, filename: str = MANIFEST_FILENAME, code: str = "E-MAN-002") -> None:
    """Refuse a document whose aliases form a cycle or expand past MAX_NODES."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    # Iterative post-order walk: (node, children expanded?) so deep nesting cannot blow the stack.
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        children = list(node.values()) + list(node.keys()) if isinstance(node, dict) else node
        if expanded:
            on_path.discard(key)
            total = 1 + sum(sizes.get(id(c), 1) for c in children)
            sizes[key] = total
            if total > MAX_NODES:
                raise MurError(
                    code,
                    f"{filename}: YAML syntax error: the document expands to more than "
                    f"{MAX_NODES} nodes through aliases",
                    "write the values out instead of repeating large anchors",
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise MurError(code, f"{filename}: YAML syntax error: an alias refers to itself (recursive structure)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)))


def parse_yaml(text: str, filename: str = MANIFEST_FILENAME, code: str = "E-MAN-002") -> Any:
    """Parse YAML text; `code` (E-MAN-002) with line/column on a syntax error, an alias bomb or a cycle."""
    try:
        value = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(" ".join(p for p in (exc.context, exc.problem) if p).split()) or " ".join(str(exc).split())
        if mark is not None:
            message = f"{filename}: YAML syntax error at line {mark.line + 1}, column {mark.column + 1}: {problem}"
        else:
            message = f"{filename}: YAML syntax error: {problem}"
        raise MurError(code, message, "fix the YAML syntax at the position shown") from exc
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow in a stream
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        what = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise MurError(
            code, f"{filename}: YAML syntax error at line {line}, column {column}: unacceptable character {what}: {exc.reason}"
        ) from exc
    except yaml.YAMLError as exc:
        raise MurError(code, f"{filename}: YAML syntax error: {' '.join(str(exc).split())}") from exc
    except RecursionError as exc:
        raise MurError(code, f"{filename}: YAML syntax error: nesting too deep") from exc
    except (ValueError, TypeError, OverflowError) as exc:  # a scalar the constructors could not build
        raise MurError(code, f"{filename}: YAML syntax error: {' '.join(str(exc).split())}") from exc
    _check_graph(value, filename, code)
    return value


def read_manifest_text(path: Path) -> str:
    """Read a manifest file; E-IO-001 when missing, E-IO-002/003 otherwise."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise MurError(
            "E-IO-001",
            f"manifest not found: {path}",
            "pass --manifest PATH, or run from the directory holding murmur.yaml",
        ) from exc
    except IsADirectoryError as exc:
        raise MurError("E-IO-001", f"manifest not found: {path} is a directory") from exc
    except PermissionError as exc:
        raise MurError("E-IO-002", f"permission denied reading {path}") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read {MANIFEST_FILENAME} at {path}: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MurError("E-MAN-002", f"{MANIFEST_FILENAME}: not valid UTF-8 text ({exc.reason} at byte {exc.start})") from exc
