"""`mur build` warnings: literal secrets (W-SEC-004) and authoring lints (W-BLD-001..003).

Both print on stderr before the `Built artifact:` line and never fail the build. Texts, links and
the secret heuristic are upstream's (`secrets.rs`, `build_lints.rs`, `commands/build.rs`):

* W-SEC-004: a mapping key containing api_key / token / secret / password (any case) whose string
  value is not a `${UPPER_VAR}` reference and either starts with `sk-` / `sk-ant-` or is longer
  than 8 bytes.
* W-BLD-001: a requires_files entry lands on a slot the packer already fills (murmur.yaml,
  capsule.wasm); W-BLD-002: capsule.wasm beside another root *.wasm (it always wins);
  W-BLD-003: a wasm/native artifact packs build inputs (Cargo.toml, Cargo.lock, *.rs, target/).
"""

from __future__ import annotations

from typing import Any

from mur.artifacts.package import CAPSULE_WASM_ENTRY, MANIFEST_ENTRY, is_root_wasm_candidate

SENSITIVE_KEYS = ("api_key", "token", "secret", "password")
SECRET_PREFIXES = ("sk-ant-", "sk-")
MIN_LITERAL_SECRET_LEN = 8
SECURITY_DOC = "https://docs.murmur.nexus/murmur-nexus/murmur/reference/diagnostics/"
BUILD_LINTS_DOC = "https://docs.murmur.nexus/murmur-nexus/murmur/reference/build-lints/"
RESERVED_ROOT_ENTRIES = (MANIFEST_ENTRY, CAPSULE_WASM_ENTRY)


def security_warning_link(code: str) -> str:
    return f"{SECURITY_DOC}#{code.lower()}"


def build_warning_link(code: str) -> str:
    return f"{BUILD_LINTS_DOC}#{code.lower()}"


def is_secret_shaped_name(name: str) -> bool:
    """Does a key name contain api_key/token/secret/password (case-insensitive)?"""
    lowered = name.lower()
    return any(s in lowered for s in SENSITIVE_KEYS)


def _is_env_reference(value: str) -> bool:
    if len(value.encode()) < 4 or not value.startswith("${") or not value.endswith("}"):
        return False
    return all(c.isascii() and (c.isupper() or c.isdigit() or c == "_") for c in value[2:-1])


def _should_warn(value: str) -> bool:
    if _is_env_reference(value):
        return False
    return value.startswith(SECRET_PREFIXES) or len(value.encode()) > MIN_LITERAL_SECRET_LEN


def _key_text(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (str, int, float)):
        return str(key)
    return "<complex key>"


def scan_secrets(root: Any) -> list[str]:
    """Dotted field paths (sequence items by index) holding a literal secret value."""
    found: list[str] = []

    def visit(value: Any, path: list[str]) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                name = _key_text(key)
                path.append(name)
                if is_secret_shaped_name(name) and isinstance(child, str) and _should_warn(child):
                    found.append(".".join(path))
                visit(child, path)
                path.pop()
        elif isinstance(value, list):
            for index, item in enumerate(value):
                path.append(str(index))
                visit(item, path)
                path.pop()

    visit(root, [])
    return found


def secret_warning_message(filename: str, field_path: str) -> str:
    """The W-SEC-004 text (everything after `warning[W-SEC-004]: `)."""
    return (
        f"{filename}: field '{field_path}' appears to contain a literal secret value\n"
        "  \u2192 use a ${VAR_NAME} reference instead and inject the value via environment\n"
        "  \u2192 this file may not be safe to commit to version control\n"
        f"  \u2192 {security_warning_link('W-SEC-004')}"
    )


def _is_build_input(archive_name: str) -> bool:
    if any(segment == "target" for segment in archive_name.split("/")):
        return True
    file_name = archive_name.rsplit("/", 1)[-1]
    return file_name in ("Cargo.toml", "Cargo.lock") or file_name.endswith(".rs")


def build_lints(plan) -> list[tuple[str, str, str]]:
    """(code, message, hint) for each W-BLD finding in a build plan, in upstream's order."""
    out: list[tuple[str, str, str]] = []
    for dropped in plan.shadowed:
        if dropped.archive_name in RESERVED_ROOT_ENTRIES:
            out.append(
                (
                    "W-BLD-001",
                    f"requires_files entry '{dropped.declared}' names the reserved archive entry "
                    f"'{dropped.archive_name}', which mur build already packs",
                    f"remove '{dropped.declared}' from requires_files: \u2014 the artifact is packed "
                    "identically without it",
                )
            )
    root_wasm = [e.archive_name for e in plan.entries if is_root_wasm_candidate(e.archive_name)]
    if CAPSULE_WASM_ENTRY in root_wasm:
        shadowed = [n for n in root_wasm if n != CAPSULE_WASM_ENTRY]
        if shadowed:
            out.append(
                (
                    "W-BLD-002",
                    f"root '{CAPSULE_WASM_ENTRY}' is always selected as the payload, so "
                    f"{', '.join(shadowed)} ships but never runs",
                    f"keep exactly one root *.wasm: drop {CAPSULE_WASM_ENTRY}, or rename the payload "
                    f"you meant to run to {CAPSULE_WASM_ENTRY}",
                )
            )
    if plan.manifest.registry_runtime in ("wasm", "native"):
        offenders = [e.archive_name for e in plan.entries if _is_build_input(e.archive_name)]
        if offenders:
            out.append(
                (
                    "W-BLD-003",
                    f"compiled artifact packages build inputs: {', '.join(offenders)}",
                    "remove them from requires_files: \u2014 a compiled artifact ships its payload, "
                    "not the sources it was built from",
                )
            )
    return out


def lint_warning_message(code: str, message: str, hint: str) -> str:
    """A W-BLD text (everything after `warning[CODE]: `)."""
    return f"{message}\n  \u2192 {hint}\n  \u2192 {build_warning_link(code)}"
