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

MANIFEST_FILENAME = "murmur.yaml"


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

# YAML 1.2 scalars, as upstream's serde_yaml reads them: only true/false are booleans (PyYAML's
# YAML 1.1 default would turn `yes`, `no`, `on`, `off` into booleans), and no sexagesimal numbers.
_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
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


def parse_yaml(text: str) -> Any:
    """Parse YAML text; E-MAN-002 with line/column on a syntax error."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        if mark is not None:
            message = (
                f"{MANIFEST_FILENAME}: YAML syntax error at line {mark.line + 1}, "
                f"column {mark.column + 1}: {problem}"
            )
        else:
            message = f"{MANIFEST_FILENAME}: YAML syntax error: {problem}"
        raise MurError("E-MAN-002", message, "fix the YAML syntax at the position shown") from exc
    except yaml.YAMLError as exc:
        raise MurError("E-MAN-002", f"{MANIFEST_FILENAME}: YAML syntax error: {exc}") from exc
    except RecursionError as exc:
        raise MurError("E-MAN-002", f"{MANIFEST_FILENAME}: YAML syntax error: nesting too deep") from exc


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
