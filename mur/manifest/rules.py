"""Cross-field rules of the capsule manifest (spec part 2), applied after the models parse.

Order follows upstream's parser: artifacts (by index), capabilities, inference (compaction, prompt
sources, the transport's field rules, endpoint, api_key), system_prompt_artifact, observability; then
capability validation (E-CAP-001 network entries, E-CAP-002 filesystem scopes). Type errors, missing
fields and range checks (`> 0`, enums) come first, from the pydantic models (mur.manifest.capsule).
"""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Any, Mapping
from urllib.parse import urlsplit

from mur.errors import MurError, warn
from mur.manifest.capsule import ROLES, Capabilities, Capsule, Inference
from mur.manifest.network import AllowEntry, ip_literal, parse_allow_list, url_host
from mur.manifest.yamlio import MANIFEST_FILENAME, one_line, type_name

M = MANIFEST_FILENAME
_ENV_REF = re.compile(r"^\$\{([A-Z_][A-Z0-9_]*)\}$")
_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_SHELLS_WITH_PATHS = re.compile(r"[/\\]")


def _artifact_error(index: int, message: str, hint: str | None = None) -> MurError:
    return MurError("E-MAN-003", f"{M}: invalid artifact declaration at index {index}: {message}", hint)


def _inference_error(field: str, message: str, hint: str | None = None) -> MurError:
    return MurError("E-MAN-003", f"{M}: invalid inference config for '{field}': {message}", hint)


def _capability_error(field: str, message: str, hint: str | None = None) -> MurError:
    return MurError("E-MAN-003", f"{M}: invalid capability config for '{field}': {message}", hint)


def validate_rules(capsule: Capsule, env: Mapping[str, str] | None) -> str | None:
    """Apply every E-MAN rule; returns the resolved inference api_key (or None).

    `env` None: `${VAR}` references are left unresolved (see `env_references`); commands that
    never call the provider (install, doctor, deploy) must not need its key."""
    _check_artifacts(capsule)
    _check_capabilities(capsule.capabilities, "capabilities")
    api_key = None
    if capsule.inference is not None:
        api_key = _check_inference(capsule, env)
        if capsule.inference.system_prompt_artifact:
            _check_prompt_artifact(capsule, capsule.inference.system_prompt_artifact)
    _check_observability(capsule)
    return api_key


# --- artifacts -----------------------------------------------------------------------------------


def _check_artifacts(capsule: Capsule) -> None:
    seen: dict[str, int] = {}
    for index, art in enumerate(capsule.artifacts):
        if art.runtime in ("wasm", "native"):
            raise _artifact_error(
                index,
                f"use 'runtime: tool'; implementation is declared in the artifact's own manifest (got '{art.runtime}')",
                "runtime: is the artifact's role (tool, driver, hook, skill); wasm/native belong in the "
                "artifact's own murmur.yaml as implementation:",
            )
        if art.runtime not in ROLES:
            raise _artifact_error(index, f"unknown runtime '{art.runtime}'; expected one of: tool, driver, hook, skill")
        if not _ARTIFACT_NAME.match(art.name) or art.name in (".", ".."):
            raise _artifact_error(
                index,
                f"artifact name '{art.name}' must be a plain name (letters, digits, '.', '_', '-'; no paths)",
            )
        if art.name in seen:
            raise _artifact_error(index, f"artifact '{art.name}' is already declared at index {seen[art.name]}")
        seen[art.name] = index
        if art.source is not None and not art.uses_local_source:
            raise _artifact_error(
                index,
                f"artifact '{art.name}' declares 'source:' but does not declare 'local_source: true' "
                f"(runtime: {art.runtime})",
                "add `local_source: true` to this artifact entry, or remove `source:` to resolve it from a store",
            )
        if art.source is not None and art.version is not None:
            warn(
                "W-MAN-002",
                f"artifact '{art.name}' declares both 'source:' and 'version: {art.version}'; "
                "version is ignored for local-source artifacts (using 'local')",
            )
        if art.source is None and art.version is None:
            raise MurError(
                "E-MAN-001",
                f"{M}: missing required field 'artifacts[{index}].version'",
                "give the artifact a version, or a local `source:` with `local_source: true`",
            )
        if art.capabilities is not None:
            if art.runtime == "skill":
                raise _artifact_error(
                    index,
                    f"artifact '{art.name}' declares per-artifact 'capabilities:' but has 'runtime: skill'; "
                    "per-artifact capabilities are only recognized on 'runtime: hook', 'runtime: tool', and "
                    "'runtime: driver' entries — use the capsule-wide top-level 'capabilities:' block instead",
                )
            _check_capabilities(art.capabilities, f"artifacts[{index}].capabilities")


# --- capabilities --------------------------------------------------------------------------------


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or c == "\x7f" for c in text)


def _check_capabilities(caps: Capabilities, base: str) -> None:
    shell = caps.shell
    if shell is not None:
        if not shell.allow:
            raise _capability_error(
                f"{base}.shell.allow",
                "must contain at least one binary",
                "list the binaries the agent may run (e.g. [bash]), or remove the shell block",
            )
        for i, binary in enumerate(shell.allow):
            if not binary.strip():
                raise _capability_error(f"{base}.shell.allow[{i}]", "must not be empty")
            if _SHELLS_WITH_PATHS.search(binary) or binary in (".", "..") or _has_control(binary):
                raise _capability_error(
                    f"{base}.shell.allow[{i}]",
                    f"'{binary}' must be a bare binary name; paths are not supported",
                    "write the name (e.g. bash); it is resolved on PATH at launch",
                )
        for i, grant in enumerate(shell.interpreter_runtime):
            gbase = f"{base}.shell.interpreter_runtime[{i}]"
            if grant.binary not in shell.allow:
                raise _capability_error(
                    f"{gbase}.binary",
                    f"'{grant.binary}' is not in capabilities.shell.allow — interpreter_runtime can only "
                    "narrow filesystem access for an already-allowlisted binary, never grant exec",
                )
            if not grant.dirs:
                raise _capability_error(f"{gbase}.dirs", "must name at least one directory")
            for j, d in enumerate(grant.dirs):
                if not d.path.startswith("/"):
                    raise _capability_error(
                        f"{gbase}.dirs[{j}].path",
                        f"'{d.path}' must be an absolute host path (start with '/') — these are filesystem "
                        "paths outside the workdir",
                    )
    for field_name in ("strip_env", "baseline_env"):
        for i, pattern in enumerate(getattr(shell, field_name, []) if shell else []):
            if not pattern.strip():
                raise _capability_error(f"{base}.shell.{field_name}[{i}]", "must not be empty")
    if caps.spawn is not None:
        for i, binary in enumerate(caps.spawn.allow):
            if not binary.strip():
                raise _capability_error(f"{base}.spawn.allow[{i}]", "must not be empty")


# --- inference -----------------------------------------------------------------------------------


def _check_inference(capsule: Capsule, env: Mapping[str, str]) -> str | None:
    inf: Inference = capsule.inference  # type: ignore[assignment]
    # Upstream's order: compaction, prompt sources, then the transport's field rules.
    if inf.compaction is not None:
        c = inf.compaction
        if not (0.0 < c.threshold <= 1.0):
            raise _inference_error(
                "inference.compaction.threshold", f"must be in (0.0, 1.0] but got {_rust_float(c.threshold)}"
            )
        if c.system_prompt is not None and c.system_prompt_file is not None:
            raise _inference_error(
                "inference.compaction.system_prompt",
                "at most one of inference.compaction.system_prompt, inference.compaction.system_prompt_file may be set",
            )
    prompts = [f for f in ("system_prompt", "system_prompt_file", "system_prompt_artifact") if getattr(inf, f)]
    if len(prompts) > 1:
        raise _inference_error(
            "inference.system_prompt",
            "at most one of system_prompt, system_prompt_file, system_prompt_artifact may be set",
        )
    if inf.transport == "process":
        for field_name, present in (
            ("inference.driver.artifact", inf.driver is not None or inf.provider is not None),
            ("inference.endpoint", inf.endpoint is not None),
            ("inference.api_key", inf.api_key is not None),
            ("inference.max_tokens", inf.max_tokens is not None),
        ):
            if present:
                raise _inference_error(
                    field_name,
                    "is not valid with transport: process",
                    "transport: process spawns the claude CLI, which brings its own endpoint and credentials",
                )
    else:
        if inf.command is not None:
            raise _inference_error(
                "inference.command",
                "is not valid with transport: http",
                "inference.command names the CLI for transport: process; remove it or switch transport",
            )
        if inf.endpoint is not None:
            check_endpoint(inf.endpoint.strip())
        for block in ("driver", "provider"):
            ref = getattr(inf, block)
            if ref is not None and ref.config is not None:
                _check_driver_config(f"inference.{block}.config", ref.config)
        name = inf.driver_artifact
        if name is not None:
            declared = capsule.artifact(name)
            if declared is not None and declared.runtime != "driver":
                raise _inference_error(
                    "inference.driver.artifact",
                    f"artifact '{name}' is declared with runtime: {declared.runtime}; the inference driver "
                    "must be declared with runtime: driver",
                )
    if not inf.api_key or env is None:
        return None
    return resolve_api_key(inf.api_key.strip(), env)


def _rust_float(value: float) -> str:
    """A float as upstream's Rust Display prints it (`0`, `1.5`, `NaN`, `inf`)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return str(int(value)) if value.is_integer() else repr(value)


def _check_driver_config(field: str, config: dict) -> None:
    """driver.config is handed to the driver as JSON (MURMUR_INFERENCE_DRIVER_CONFIG): it must convert
    as it is, without Python's silent key coercion (upstream's serde_json refuses non-string keys)."""

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _inference_error(field, f"failed to convert to JSON: key must be a string (got {type_name(key)})")
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, float) and not math.isfinite(value):
            raise _inference_error(field, f"failed to convert to JSON: {value} is not a JSON number")
        elif not (value is None or isinstance(value, (str, int, float, bool))):
            raise _inference_error(field, f"failed to convert to JSON: a {type_name(value)} has no JSON form")

    walk(config)


def check_endpoint(endpoint: str) -> None:
    """inference.endpoint: any https:// URL, or http:// to localhost / a loopback IP (E-MAN-003)."""
    hint = "use https:// for remote endpoints, or http://localhost / a loopback IP for a local model server"

    def unparsable(reason: str) -> MurError:
        return _inference_error("inference.endpoint", f"failed to parse '{endpoint}' as a URL: {reason}", hint)

    try:
        parts = urlsplit(endpoint)
    except ValueError as exc:
        raise unparsable("invalid IPv6 address" if "IPv6" in str(exc) else str(exc)) from None
    scheme = parts.scheme.lower()
    if not scheme or "://" not in endpoint:
        raise unparsable("relative URL without a base")
    if scheme not in ("http", "https"):
        raise _inference_error(
            "inference.endpoint", f"unsupported scheme '{scheme}' in '{endpoint}' — expected http or https", hint
        )
    try:
        host = url_host(parts.netloc)
    except ValueError as exc:
        raise unparsable(str(exc)) from None
    if scheme == "https" or host == "localhost":
        return
    ip = ip_literal(host)
    if ip is not None and ip.is_loopback:
        return
    raise _inference_error(
        "inference.endpoint",
        f"'{endpoint}' uses plain http:// with non-loopback host '{host}' — use https:// for remote "
        "endpoints, or http://localhost or a loopback IP literal for local inference",
        hint,
    )


def env_references(capsule: Capsule) -> dict[str, str]:
    """Environment variables the manifest references: field path -> variable name."""
    inf = capsule.inference
    match = _ENV_REF.match(inf.api_key.strip()) if inf is not None and inf.api_key else None
    return {"inference.api_key": match.group(1)} if match else {}


def unset_reference_error(field_path: str, variable: str, hint: str | None = None) -> MurError:
    """E-MAN-003 for a `${VARIABLE}` reference the environment does not satisfy."""
    return MurError(
        "E-MAN-003",
        f"{M}: {field_path} references ${{{variable}}} but the environment variable is not set",
        hint or f"export {variable}=... before running, or put it in a .env file next to murmur.yaml",
    )


def resolve_api_key(value: str, env: Mapping[str, str]) -> str:
    """`${UPPER_SNAKE}` -> that env var (E-MAN-003 when unset); anything else is a literal."""
    match = _ENV_REF.match(value)
    if not match:
        return value
    variable = match.group(1)
    if variable not in env:
        raise unset_reference_error("inference.api_key", variable)
    return env[variable]


def _check_prompt_artifact(capsule: Capsule, name: str) -> None:
    art = capsule.artifact(name)
    if art is None:
        raise _inference_error(
            "inference.system_prompt_artifact",
            f"artifact '{name}' is not declared in artifacts:",
            "declare the artifact (typically a skill) under artifacts:",
        )
    if not art.is_prompt_payload:
        raise _inference_error(
            "inference.system_prompt_artifact",
            f"artifact '{name}' (runtime: {art.runtime}) does not declare 'prompt_payload: true', "
            "which system_prompt_artifact requires",
            f"add `prompt_payload: true` to the '{name}' entry in artifacts:",
        )


# --- observability -------------------------------------------------------------------------------


def _check_observability(capsule: Capsule) -> None:
    obs = capsule.observability
    if obs.otel_endpoint is not None:
        scheme = urlsplit(obs.otel_endpoint.strip()).scheme.lower()
        if scheme not in ("http", "https"):
            raise MurError(
                "E-MAN-003",
                f"{M}: invalid observability config for 'observability.otel_endpoint': "
                f"'{obs.otel_endpoint}' is not an http(s) URL",
                "use the OTLP/HTTP base URL, e.g. http://localhost:4318",
            )
    if obs.eval is None:
        return
    for i, scorer in enumerate(obs.eval.scorers):
        base = f"observability.eval.scorers[{i}]"
        if scorer.type in ("max_turns", "max_tokens"):
            if scorer.max is None:
                raise MurError("E-MAN-001", f"{M}: missing required field '{base}.max'")
            if scorer.max <= 0:
                raise MurError(
                    "E-MAN-003", f"{M}: invalid observability config for '{base}.max': must be greater than zero"
                )
        if scorer.type == "tool_sequence" and scorer.expected is None:
            raise MurError("E-MAN-001", f"{M}: missing required field '{base}.expected'")


# --- E-CAP-001 / E-CAP-002 -----------------------------------------------------------------------


def check_scope(scope: str) -> str:
    """E-CAP-002 unless `scope` is relative and stays inside the workdir; returns it unchanged."""
    hint = "use a relative path inside the workdir, e.g. `scope: data`"
    shown = one_line(scope)
    if "\x00" in scope:  # no filesystem path can hold one; refuse here rather than fail at mkdir
        raise MurError("E-CAP-002", f"invalid filesystem scope '{shown}': scope must not contain a NUL byte", hint)
    if scope.startswith("/") or PurePosixPath(scope).is_absolute():
        raise MurError(
            "E-CAP-002", f"invalid filesystem scope '{shown}': scope must be relative to the workdir", hint
        )
    depth = 0
    for part in PurePosixPath(scope).parts:
        if part == ".":
            continue
        if part == "..":
            if depth == 0:
                raise MurError(
                    "E-CAP-002", f"invalid filesystem scope '{shown}': scope cannot escape the workdir via '..'", hint
                )
            depth -= 1
        else:
            depth += 1
    return scope


def validate_scopes_and_networks(capsule: Capsule) -> list[AllowEntry]:
    """Capsule-wide E-CAP-001/002 checks; returns the parsed capsule allow list."""
    allow = parse_allow_list(capsule.capabilities.network.allow)
    if capsule.capabilities.filesystem.scope is not None:
        check_scope(capsule.capabilities.filesystem.scope.strip())
    return allow
