"""What a valid capsule manifest parses to: the spec's defaults, derived flags, grants and api_key.

The golden cases pin what a user sees; these pin what the rest of mur reads from the model.
"""

from __future__ import annotations

import pytest

from mur.errors import MurError, collect_warnings
from mur.manifest import parse_capsule
from mur.manifest.capsule import GiB, MiB
from mur.manifest.network import url_allowed

HEAD = 'name: c\nversion: "0.1.0"\n'


def parse(body: str = "", env: dict[str, str] | None = None):
    return parse_capsule(HEAD + body, env=env or {})


def test_spec_defaults_when_everything_is_omitted():
    loaded = parse()
    c = loaded.capsule
    limits, res = c.capabilities.limits, c.capabilities.resources
    assert (limits.memory_bytes, limits.table_elements, limits.instances, limits.deadline_seconds) == (
        512 * MiB, 100_000, 1000, 600)
    assert (
        res.max_processes, res.max_open_files, res.max_file_size_bytes, res.cpu_seconds, res.memory_bytes,
        res.cgroup_memory_bytes, res.cgroup_pids_max, res.cgroup_cpu_percent, res.cgroup_io_bytes_per_sec,
        res.workdir_max_bytes,
    ) == (128, 1024, 4 * GiB, 3600, 2 * GiB, 4 * GiB, 256, 200, 100 * MiB, 10 * GiB)
    lc = c.lifecycle
    assert (lc.task_acceptance, lc.after_task, lc.queue_depth, lc.input_timeout_secs, lc.conversation) == (
        "single", "exit", 1, None, "stateless")
    assert c.capabilities.network.unix_sockets is False
    assert c.capabilities.network.allow == [] and c.capabilities.filesystem.scope is None
    assert c.capabilities.containment is None and c.capabilities.shell is None
    assert c.artifacts == [] and c.inference is None and c.context.max_tokens is None
    assert c.network.internal_port is None and c.observability.otel_endpoint is None
    assert c.mur_version is None and loaded.api_key is None


def test_partial_blocks_default_field_by_field():
    c = parse("capabilities:\n  limits:\n    instances: 7\n  resources:\n    cpu_seconds: 9\n").capsule
    assert c.capabilities.limits.instances == 7 and c.capabilities.limits.memory_bytes == 512 * MiB
    assert c.capabilities.resources.cpu_seconds == 9 and c.capabilities.resources.max_processes == 128


@pytest.mark.parametrize(
    "block, field",
    [("limits", f) for f in ("memory_bytes", "table_elements", "instances", "deadline_seconds")]
    + [("resources", f) for f in (
        "max_processes", "max_open_files", "max_file_size_bytes", "cpu_seconds", "memory_bytes",
        "cgroup_memory_bytes", "cgroup_pids_max", "cgroup_cpu_percent", "cgroup_io_bytes_per_sec",
        "workdir_max_bytes")],
)
def test_every_limit_and_resource_must_be_greater_than_zero(block, field):
    with pytest.raises(MurError) as err:
        parse(f"capabilities:\n  {block}:\n    {field}: 0\n")
    assert err.value.code == "E-MAN-003"
    assert err.value.message == (
        f"murmur.yaml: invalid capability config for 'capabilities.{block}.{field}': must be greater than zero")


def test_inference_defaults_http():
    inf = parse("inference:\n  transport: http\n  model: m\n").capsule.inference
    assert (inf.max_turns, inf.max_task_reopens, inf.effective_max_tokens) == (10, 1, 8192)
    assert inf.endpoint is None and inf.driver_artifact is None and inf.compaction is None


def test_inference_defaults_process_and_compaction():
    inf = parse("inference:\n  transport: process\n  model: m\n  compaction: {}\n").capsule.inference
    assert inf.effective_command == "claude"
    assert (inf.compaction.threshold, inf.compaction.model, inf.compaction.dump_summaries) == (0.98, None, False)


def test_legacy_provider_artifact_and_driver_precedence():
    inf = parse("inference:\n  transport: http\n  model: m\n  provider:\n    artifact: old\n").capsule.inference
    assert inf.driver_artifact == "old"
    inf = parse(
        "inference:\n  transport: http\n  model: m\n  provider:\n    artifact: old\n  driver:\n    artifact: new\n"
    ).capsule.inference
    assert inf.driver_artifact == "new"


def test_api_key_resolution():
    body = "inference:\n  transport: http\n  model: m\n  api_key: {}\n"
    assert parse(body.format("${MY_KEY}"), env={"MY_KEY": "v1"}).api_key == "v1"
    assert parse(body.format("${MY_KEY}"), env={"MY_KEY": ""}).api_key == ""  # set-but-empty is set
    assert parse(body.format("sk-literal")).api_key == "sk-literal"
    assert parse(body.format("'${lower_case}'")).api_key == "${lower_case}"
    assert parse(body.format("'prefix-${MY_KEY}'"), env={"MY_KEY": "v"}).api_key == "prefix-${MY_KEY}"
    with pytest.raises(MurError) as err:
        parse(body.format("${MISSING_KEY}"))
    assert err.value.code == "E-MAN-003"
    assert err.value.message == (
        "murmur.yaml: inference.api_key references ${MISSING_KEY} but the environment variable is not set")


def test_local_source_and_prompt_payload_derive_from_the_role():
    arts = parse(
        "artifacts:\n"
        "  - {name: s, source: ./s.md, runtime: skill}\n"
        "  - {name: t, version: '1'}\n"
        "  - {name: u, source: ./u, local_source: true, prompt_payload: true}\n"
        "  - {name: v, version: '1', runtime: skill, local_source: false, prompt_payload: false}\n"
    ).capsule.artifacts
    assert [(a.uses_local_source, a.is_prompt_payload) for a in arts] == [
        (True, True), (False, False), (True, True), (False, False)]
    assert [a.display_version for a in arts] == ["local", "1", "local", "1"]
    assert [a.runtime for a in arts] == ["skill", "tool", "tool", "skill"]


def test_hooks_are_default_deny_and_tools_inherit_the_ceiling():
    loaded = parse(
        "capabilities:\n  network:\n    allow: [https://api.example.com, example.org]\n"
        "artifacts:\n"
        "  - {name: h, version: '1', runtime: hook}\n"
        "  - name: h2\n    version: '1'\n    runtime: hook\n"
        "    capabilities: {network: {allow: [https://telemetry.example.com]}, filesystem: {scope: hook-state}}\n"
        "  - {name: t, version: '1'}\n"
        "  - name: t2\n    version: '1'\n"
        "    capabilities: {network: {allow: [https://api.example.com, https://example.org:8443, api.example.com]},"
        " filesystem: {scope: cache}}\n"
        "  - {name: t3, version: '1', capabilities: {network: {allow: []}}}\n"
        "  - {name: t4, version: '1', capabilities: {filesystem: {scope: data}}}\n"
        "  - {name: s, source: ./s.md, runtime: skill}\n"
    )
    g, ceiling = loaded.grants, loaded.network_allow
    assert "s" not in g  # a skill never executes
    assert (g["h"].effective_network(ceiling), g["h"].preopen, g["h"].scope) == ([], "none", None)
    assert [e.raw for e in g["h2"].effective_network(ceiling)] == ["https://telemetry.example.com"]
    assert (g["h2"].preopen, g["h2"].scope) == ("scope", "hook-state")
    assert g["t"].effective_network(ceiling) == ceiling and g["t"].preopen == "workdir"
    # declaration ∩ ceiling: a bare host is broader than a scheme-bound ceiling entry and is dropped
    assert [e.raw for e in g["t2"].effective_network(ceiling)] == ["https://api.example.com", "https://example.org:8443"]
    assert g["t2"].dropped == ["api.example.com"] and g["t2"].scope == "cache"
    assert g["t3"].effective_network(ceiling) == []  # explicit [] narrows to zero
    assert g["t4"].effective_network(ceiling) == ceiling and g["t4"].scope == "data"
    assert [c for c, _ in loaded.stage_warnings] == ["W-SEC-007"]
    # the narrowed grant is what the outbound gate enforces
    t2 = g["t2"].effective_network(ceiling)
    assert url_allowed(t2, "https://example.org:8443/x") and not url_allowed(t2, "https://example.org/x")
    assert not url_allowed(g["h"].effective_network(ceiling), "https://api.example.com/")


def test_ceiling_host_port_covers_a_scheme_url_on_that_port_only():
    loaded = parse(
        "capabilities:\n  network:\n    allow: [example.com:443, other.com]\n"
        "artifacts:\n  - name: t\n    version: '1'\n"
        "    capabilities: {network: {allow: [https://example.com, http://example.com, https://other.com:1]}}\n"
    )
    assert [e.raw for e in loaded.grants["t"].network] == ["https://example.com", "https://other.com:1"]
    assert loaded.grants["t"].dropped == ["http://example.com"]


def test_warnings_are_not_printed_while_parsing_except_manifest_ones():
    """W-SEC-006..009/011 are staging warnings, held on the model; W-MAN-* print as the file parses."""
    with collect_warnings() as seen:
        loaded = parse(
            "typo_key: 1\ncapabilities:\n  shell:\n    allow: [python3]\n    interpreter_runtime:\n"
            "      - {binary: python3, dirs: [{path: /usr/lib/python3, list_dir: false}]}\n"
        )
    assert [c for c, _ in seen] == ["W-MAN-001"]
    assert [c for c, _ in loaded.stage_warnings] == ["W-SEC-009"]
    with collect_warnings() as seen:
        loaded.emit_stage_warnings()
        loaded.emit_stage_warnings()  # once only
    assert [c for c, _ in seen] == ["W-SEC-009"]


def test_driver_config_is_kept_verbatim_and_not_checked_for_unknown_keys():
    with collect_warnings() as seen:
        inf = parse(
            "inference:\n  transport: http\n  model: m\n  driver:\n    artifact: d\n"
            "    config: {anything: [1, 2.5, null, true], '': x}\n"
        ).capsule.inference
    assert inf.driver.config == {"anything": [1, 2.5, None, True], "": "x"}
    assert seen == []


def test_unknown_key_suggestions_use_edit_distance():
    from mur.manifest.unknown import nearest_known_key

    assert nearest_known_key("read-only", ["scope", "workdir_exec", "read_only"]) == "read_only"
    assert nearest_known_key("allwo", ["allow", "unix_sockets"]) == "allow"
    assert nearest_known_key("quantum_teleport", ["name", "version", "artifacts"]) is None
    assert nearest_known_key("evn", ["env"]) == "env"
