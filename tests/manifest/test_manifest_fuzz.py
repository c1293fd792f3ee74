"""Hypothesis fuzz of both parsers: any input yields a model or a MurError, never another exception.

Inputs: arbitrary text, YAML-shaped text built from the manifest's own vocabulary, arbitrary nested
structures dumped to YAML, and targeted mutations of the spec's maximal manifest (which reach the
cross-field rules the first three rarely get past). Plus properties of the two security checks the
parser owns: network allow entries (narrowing only ever subtracts) and filesystem scopes (an
accepted scope never leaves the workdir), and the inference endpoint check.
"""

from __future__ import annotations

import copy
import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mur.errors import MurError, collect_warnings
from mur.manifest import parse_capsule
from mur.manifest.artifact import parse_artifact_manifest, validate_artifact_name
from mur.manifest.network import AllowEntry, ip_literal, narrow, parse_allow_entry, url_allowed
from mur.manifest.rules import check_endpoint, check_scope
from mur.manifest.yamlio import one_line

FUZZ = settings(max_examples=int(os.environ.get("MUR_FUZZ_EXAMPLES", "250")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAXIMAL = yaml.safe_load((Path(__file__).parent / "cases" / "ok-maximal.yaml").read_text())
ENV = {"ANTHROPIC_API_KEY": "k", "MY_KEY": "v"}

KEYS = sorted({
    "name", "version", "mur_version", "artifacts", "runtime", "source", "local_source", "prompt_payload",
    "capabilities", "network", "allow", "unix_sockets", "filesystem", "scope", "workdir_exec", "shell",
    "strip_env", "baseline_env", "interpreter_runtime", "binary", "dirs", "path", "list_dir", "spawn", "env",
    "limits", "memory_bytes", "table_elements", "instances", "deadline_seconds", "resources", "max_processes",
    "cpu_seconds", "containment", "internal_port", "context", "max_tokens", "observability", "otel_endpoint",
    "eval", "dataset_id", "scorers", "type", "max", "expected", "inference", "transport", "endpoint", "model",
    "api_key", "driver", "artifact", "config", "provider", "command", "compaction", "threshold",
    "system_prompt", "system_prompt_file", "system_prompt_artifact", "dump_summaries", "max_turns",
    "max_task_reopens", "lifecycle", "task_acceptance", "after_task", "queue_depth", "input_timeout_secs",
    "conversation", "trace", "include_tool_output", "execution", "requires_files", "implementation",
})
WORDS = [
    "http", "process", "tool", "driver", "hook", "skill", "wasm", "native", "static", "advisory", "scoped",
    "sealed", "queue", "single", "none", "sleep", "exit", "threaded", "exit_ok", "max_turns", "tool_sequence",
    "https://api.example.com", "http://127.0.0.1:8080", "http://evil.example.com", "api.example.com:443",
    "/usr/lib/python3", "../up", "/abs", ".", "bash", "python3", "${ANTHROPIC_API_KEY}", "${UNSET_VAR}",
    "0", "-1", "1", "0.5", "1.5", "true", "false", "yes", "~", "null", ".nan", ".inf", "99999999999999999999",
    "2024-01-01", "0x10", "0o7", "''", '""', "[]", "{}", "[a, b]", "{a: 1}", "&a x", "*a", "!!binary aGk=",
    "!!str 1", "|", ">", ":", "- x", "? x", "@x", "%x", "`x", "'unterminated", '"\\x"', "\t", "#c",
]


def model_or_mur_error(parse, text: str):
    """Run a parser; return the model or the MurError (anything else fails the test)."""
    with collect_warnings():
        try:
            return parse(text)
        except MurError as err:
            assert err.code.startswith(("E-MAN-", "E-CAP-", "E-BLD-", "E-IO-")), err.code
            assert err.message and "\n" not in err.message
            return err


def capsule(text: str):
    return model_or_mur_error(lambda t: parse_capsule(t, env=ENV), text)


def artifact(text: str):
    def parse(t):
        manifest = parse_artifact_manifest(t)
        validate_artifact_name(manifest.name)
        return manifest

    return model_or_mur_error(parse, text)


# --- arbitrary text --------------------------------------------------------------------------


@FUZZ
@given(st.text())
def test_arbitrary_text(text):
    capsule(text)
    artifact(text)


@FUZZ
@given(st.lists(
    st.tuples(st.integers(0, 8), st.sampled_from(["key", "item", "bare"]), st.sampled_from(KEYS + ["x", "1"]),
              st.sampled_from(WORDS + [""]) | st.text(max_size=12)),
    max_size=25,
))
def test_yaml_shaped_text(lines):
    out = []
    for indent, kind, key, value in lines:
        pad = " " * indent
        if kind == "key":
            out.append(f"{pad}{key}: {value}")
        elif kind == "item":
            out.append(f"{pad}- {key}: {value}")
        else:
            out.append(f"{pad}{value}")
    text = "\n".join(out) + "\n"
    capsule(text)
    artifact(text)
    capsule("name: a\nversion: '1'\n" + text)


# --- arbitrary structures dumped to YAML ------------------------------------------------------

SCALARS = (
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20) | st.sampled_from(WORDS)
)
STRUCTURES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8) | st.integers(-3, 3) | st.booleans(),
                      children, max_size=5),
    max_leaves=30,
)


def dump(value) -> str:
    return yaml.safe_dump(value, allow_unicode=True, sort_keys=False)


@FUZZ
@given(STRUCTURES)
def test_arbitrary_structures(value):
    capsule(dump(value))
    artifact(dump(value))


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS), STRUCTURES, max_size=6))
def test_arbitrary_structures_with_identity(extra):
    capsule(dump({"name": "a", "version": "1", **extra}))
    artifact(dump({"name": "a", "version": "1", **extra}))


# --- mutations of the maximal manifest (reach the cross-field rules) --------------------------


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


PATHS = [p for p in _paths(MAXIMAL) if p]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(["set", "delete"]), STRUCTURES), max_size=4))
def test_mutated_maximal_manifest(mutations):
    doc = copy.deepcopy(MAXIMAL)
    for path, action, value in mutations:
        parent = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            if action == "delete":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path
    result = capsule(dump(doc))
    if not mutations:
        assert not isinstance(result, MurError)


def test_the_maximal_manifest_is_valid():
    assert not isinstance(capsule(dump(MAXIMAL)), MurError)


# --- network allow entries --------------------------------------------------------------------

HOSTS = st.sampled_from([
    "api.example.com", "API.Example.COM", "localhost", "127.0.0.1", "127.1", "0x7f.0.0.1", "10.0.0.1", "[::1]",
    "::1", "example.com.", "a_b.example", "*.example.com", "exa mple.com", "", "1.2.3.4.5", "999.1.1.1",
    "xn--bcher-kva.example", "ex%41mple.com",
]) | st.text(alphabet="abc.-_:[]0123456789%@/?#", max_size=15)
ENTRIES = st.builds(
    lambda scheme, host, port, tail: f"{scheme}{host}{port}{tail}",
    st.sampled_from(["", "http://", "https://", "HTTPS://", "ftp://", "://", "http:/"]),
    HOSTS,
    st.sampled_from(["", ":80", ":443", ":8080", ":0", ":65536", ":x", ":"]),
    st.sampled_from(["", "/", "/v1", "?q", "#f", "@u"]),
) | st.text(max_size=30)


def entry_or_none(text: str) -> AllowEntry | None:
    try:
        return parse_allow_entry(text)
    except MurError as err:
        assert err.code == "E-CAP-001"
        assert err.message.startswith(f"invalid network allow entry '{one_line(text)}': ")
        assert "\n" not in err.message
        return None


@FUZZ
@given(ENTRIES)
def test_allow_entries_parse_or_are_e_cap_001(text):
    entry = entry_or_none(text)
    if entry is not None:
        assert entry.host and entry.host == entry.host.lower()
        assert entry.scheme in (None, "http", "https")
        assert entry.port is None or 0 < entry.port <= 65535


REQUESTS = st.tuples(
    st.sampled_from(["http", "https"]),
    st.sampled_from(["api.example.com", "example.com", "localhost", "127.0.0.1", "10.0.0.1", "::1", "other.org"]),
    st.sampled_from([80, 443, 8080, 11434]),
)


@FUZZ
@given(st.lists(ENTRIES, max_size=5), st.lists(ENTRIES, max_size=5), st.lists(REQUESTS, max_size=6))
def test_narrowing_only_ever_subtracts(ceiling_texts, declared_texts, requests):
    ceiling = [e for e in map(entry_or_none, ceiling_texts) if e is not None]
    declared = [e for e in map(entry_or_none, declared_texts) if e is not None]
    kept, dropped = narrow(declared, ceiling)
    assert len(kept) + len(dropped) == len(declared)
    for scheme, host, port in requests:
        if any(e.matches(scheme, host, port) for e in kept):
            assert any(c.matches(scheme, host, port) for c in ceiling), (scheme, host, port)
        url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}/x"
        assert url_allowed(kept, url) <= url_allowed(ceiling, url)


@FUZZ
@given(st.text(max_size=40))
def test_url_allowed_never_raises(url):
    url_allowed([parse_allow_entry("example.com"), parse_allow_entry("https://api.example.com")], url)


# --- filesystem scopes ------------------------------------------------------------------------


@FUZZ
@given(st.text(alphabet="./ab\\~\x00", max_size=20) | st.text(max_size=20))
def test_accepted_scopes_stay_inside_the_workdir(scope):
    try:
        check_scope(scope)
    except MurError as err:
        assert err.code == "E-CAP-002"
        assert err.message.startswith(f"invalid filesystem scope '{one_line(scope)}': ")
        return
    resolved = os.path.normpath(os.path.join("/workdir", scope))
    assert resolved == "/workdir" or resolved.startswith("/workdir/"), scope
    assert "\x00" not in scope


# --- inference endpoint -------------------------------------------------------------------------


@FUZZ
@given(st.builds(
    lambda scheme, host, port, path: f"{scheme}{host}{port}{path}",
    st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "", "http:", "//"]),
    HOSTS | st.sampled_from(["2130706433", "0177.0.0.1", "127.0.0.1.nip.io", "0.0.0.0", "[::ffff:127.0.0.1]"]),
    st.sampled_from(["", ":11434", ":99999", ":x"]),
    st.sampled_from(["", "/v1", "?q"]),
) | st.text(max_size=30))
def test_endpoint_check(endpoint):
    try:
        check_endpoint(endpoint)
    except MurError as err:
        assert err.code == "E-MAN-003"
        assert err.message.startswith("murmur.yaml: invalid inference config for 'inference.endpoint': ")
        return
    parts = urlsplit(endpoint)
    assert parts.scheme.lower() in ("http", "https")
    if parts.scheme.lower() == "http":
        host = (parts.hostname or "").lower()
        ip = ip_literal(host)
        assert host == "localhost" or (ip is not None and ip.is_loopback), endpoint


def test_loopback_detection_follows_url_parsing_not_string_prefixes():
    for host, loopback in [("127.0.0.1", True), ("127.255.0.9", True), ("127.1", True), ("2130706433", True),
                           ("0x7f.1", True), ("0177.0.0.1", True), ("::1", True), ("0.0.0.0", False),
                           ("128.0.0.1", False), ("::ffff:127.0.0.1", False), ("127.0.0.1.nip.io", None)]:
        ip = ip_literal(host)
        if loopback is None:
            assert ip is None
        else:
            assert ip is not None and ip.is_loopback is loopback, host
    assert ip_literal("1.2.65535") == ipaddress.IPv4Address("1.2.255.255")  # the last part spans bytes
    for bad in ("1.2.3.4.5", "256.1.1.1", "1.2.3.256", "1.2.3.0x100", "08.1.1.1"):
        try:
            ip_literal(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")
    assert ip_literal("1.2.3.4") == ipaddress.IPv4Address("1.2.3.4")
