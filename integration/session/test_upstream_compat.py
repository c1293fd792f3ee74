"""Upstream's behaviours, reproduced with our own guests and asserted through the real CLI (issue 28).

Each test names the upstream test (crates/murmur-cli/tests/*.rs) whose expectation it checks; the
guests do what upstream's fixtures do: the probe tool's `ask` op is request-input-tool, the compat
driver (guests/compat_driver) is streaming-driver and continuation-driver, guests/native_tool is the
native fixture tool. Model turns come from a loopback model server through mur's own Anthropic driver.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from compat_support import GUESTS, ROOT, Serving, events, mur, native_zip, run_json, tool_dir, wasm_zip

DRIVER = "murmur-driver-anthropic"


@pytest.fixture(scope="module")
def built(componentize_py, tmp_path_factory) -> dict[str, Path]:
    """Local-source artifact dirs: mur's Anthropic driver, the probe tool, the compat driver."""
    from mur.wasm.build import build_component, build_guest_dir

    base = tmp_path_factory.mktemp("artifacts")
    driver = base / DRIVER
    shutil.copytree(ROOT / "examples" / DRIVER, driver, ignore=shutil.ignore_patterns("*.wasm", "__pycache__"))
    build_guest_dir(driver)
    probe = build_component(ROOT / "tests" / "wasm" / "guests" / "probe", "tool")
    compat = build_component(GUESTS / "compat_driver", "driver")
    return {
        "driver": driver,
        "probe": tool_dir(base / "probe", "probe", "tool", probe,
                          'description: Probe tool\ninput_schema: \'{"type":"object"}\'\n'),
        "probe_wasm": probe,
        "compat": tool_dir(base / "compat", "compat-driver", "driver", compat),
    }


def agent(path: Path, server_url: str, built: dict, *, tools: str = "", caps: str = "", inference: str = "",
          top: str = "", driver: str = DRIVER, lifecycle: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    source = built["compat"] if driver == "compat-driver" else built["driver"]
    (path / "murmur.yaml").write_text(f"""name: compat-agent
version: "0.2.0"
{top}artifacts:
  - name: {driver}
    runtime: driver
    source: {source}
    local_source: true
{tools}capabilities:
  network:
    allow: ["127.0.0.1"]
{caps}inference:
  transport: http
  endpoint: {server_url}
  model: test-model
  api_key: ${{LOOPBACK_API_KEY}}
  driver:
    artifact: {driver}
{inference}{lifecycle}""")
    return path / "murmur.yaml"


PROBE = "  - name: probe\n    runtime: tool\n    source: {}\n    local_source: true\n"
BASH = "  shell:\n    allow: [bash]\n"


# -- 1. agent tools can request input (input_required.rs) ---------------------------------------


def test_an_agent_tool_asking_for_input_suspends_the_task_until_message_send(built, model_server, tmp_path, home):
    server = model_server([{"tool_use": {"name": "probe", "input": {"op": "ask", "prompt": "What branch should I use?"}}},
                           {"text": "task completed after input"}])
    manifest = agent(tmp_path / "cap", server.url, built, tools=PROBE.format(built["probe"]))
    run = Serving(manifest, home)
    try:
        first = run.send("start the task", "msg-1")
        assert first["status"]["state"] == "submitted"
        waiting = run.wait_state(first["id"], "input-required")
        assert "What branch" in waiting["artifacts"][0]["parts"][0]["text"]
        assert run.send("use main branch", "msg-2")["status"]["state"] in ("working", "completed")
        done = run.wait_state(first["id"], "completed")
        assert done["status"]["state"] == "completed"
        code, _, err = run.finish()
    finally:
        run.kill()
    assert code == 0, err
    answer = json.dumps(server.message_requests()[1].body["messages"][-1])
    assert "use main branch" in answer  # the tool got the reply and the model saw it


def test_an_unanswered_input_request_fails_the_task_at_input_timeout(built, model_server, tmp_path, home):
    server = model_server([{"tool_use": {"name": "probe", "input": {"op": "ask", "prompt": "Quick question"}}},
                           {"text": "would have completed"}])
    manifest = agent(tmp_path / "cap", server.url, built, tools=PROBE.format(built["probe"]),
                     lifecycle="lifecycle:\n  input_timeout_secs: 1\n")
    run = Serving(manifest, home)
    try:
        task = run.send("start timed task", "msg-1")
        run.wait_state(task["id"], "input-required")
        code, _, _ = run.finish()
    finally:
        run.kill()
    assert code == 1
    end = events(run.session, "task_end")[-1]
    assert end["exit_status"] == "failed" and end["error"] == "input-timeout"
    assert len(server.message_requests()) == 1  # the loop ended there: no second model call


# -- 2. stream frames for agent tasks (streaming.rs) --------------------------------------------


def test_driver_chunks_stream_as_text_frames_then_the_cursor_removal(built, model_server, tmp_path, home):
    manifest = agent(tmp_path / "cap", "http://127.0.0.1:9", built, driver="compat-driver",
                     inference="    config:\n      mode: stream\n")
    run = Serving(manifest, home)
    try:
        frames = run.stream("streaming test task")
        run.finish()
    finally:
        run.kill()
    kinds = [(k, d.get("final")) for k, d in frames]
    chunks = [d["text"] for k, d in frames if k == "text" and d["final"] is False]
    assert chunks == ["chunk_one ", "chunk_two ", "chunk_three"]
    cursor = kinds.index(("text", True))
    assert frames[cursor][1]["text"] == ""
    completed = next(i for i, (k, d) in enumerate(frames) if k == "status" and d["status"]["state"] == "completed")
    assert cursor < completed and ("status", False) in kinds[:cursor]  # a working frame came first


def test_a_non_streaming_driver_sends_one_final_text_and_tool_calls_become_artifacts(built, model_server, tmp_path,
                                                                                     home):
    server = model_server([{"tool_use": {"name": "probe", "input": {"op": "echo", "payload": "hi"}}},
                           {"text": "the full response text"}])
    manifest = agent(tmp_path / "cap", server.url, built, tools=PROBE.format(built["probe"]))
    run = Serving(manifest, home)
    try:
        frames = run.stream("streaming test task")
        run.finish()
    finally:
        run.kill()
    texts = [d for k, d in frames if k == "text"]
    assert texts == [{"id": texts[0]["id"], "text": "the full response text", "final": True}]
    [artifact] = [d for k, d in frames if k == "artifact"]
    assert artifact["artifact"]["tool_name"] == "probe" and '"status":"passed"' in artifact["artifact"]["content"]
    workings = [d["status"]["message"] for k, d in frames if k == "status" and d["status"]["state"] == "working"]
    assert "inference turn 1" in workings and "inference turn 2" in workings


# -- 3. native tools (murmur_md.rs, git_tool.rs, native_tool_packaging.rs) ----------------------


@pytest.mark.requires_root
@pytest.mark.requires_landlock
def test_a_native_tool_is_staged_executable_and_runs_inside_the_shell_sandbox(built, model_server, tmp_path, home):
    server = model_server([
        {"tool_use": [{"name": "fixture-tool", "id": "toolu_create",
                       "input": {"operation": "create_dir", "path": "made/here", "label": "fixture-label"}},
                      {"name": "fixture-tool", "id": "toolu_escape",
                       "input": {"operation": "escape", "path": str(tmp_path / "outside.txt")}},
                      {"name": "fixture-tool", "id": "toolu_env",
                       "input": {"operation": "env", "names": ["MURMUR_CAPSULE_NAME", "MURMUR_SESSION_ID"]}}]},
        {"text": "Directory created."},
    ])
    project = tmp_path / "cap"
    # the fixture is a Python script: its interpreter's runtime is granted like a shell tool's would be
    python = ("  shell:\n    allow: [python3]\n    interpreter_runtime:\n      - binary: python3\n        dirs:\n"
              "          - {path: /usr/lib/python3.11, list_dir: true}\n")
    manifest = agent(project, server.url, built, tools="  - name: fixture-tool\n    version: 0.1.0\n    runtime: tool\n",
                     caps=python)
    zipped = native_zip(tmp_path, "fixture-tool", "0.1.0", GUESTS / "native_tool" / "fixture-tool",
                        description="Creates and lists directories")
    assert mur("install", str(zipped), cwd=project, home=home).returncode == 0
    proc, session = run_json(manifest, home, "-t", "Create ./made/here.")
    assert proc.returncode == 0, proc.stderr
    work = session / "work"
    staged = work / "tools" / "fixture-tool" / "fixture-tool"
    assert staged.is_file() and staged.stat().st_mode & 0o111  # upstream's layout, executable
    assert (work / "made" / "here" / "label.txt").read_text() == "fixture-label"  # ran in the tools' workdir
    assert not (tmp_path / "outside.txt").exists()  # confined: Landlock refused the write
    results = {b["tool_use_id"]: b["content"][0]["text"] for b in server.message_requests()[1].body["messages"][-1]["content"]}
    assert "made/here" in results["toolu_create"] and "fixture-label" in results["toolu_create"]
    assert json.loads(json.loads(results["toolu_escape"])["data"])["written"] is False
    assert "compat-agent" in results["toolu_env"] and session.name in results["toolu_env"]
    assert "**fixture-tool** (v0.1.0, tool) — Creates and lists directories" in (work / "MURMUR.md").read_text()
    calls = events(session, "tool_call")
    assert [c["status"] for c in calls] == ["ok", "ok", "ok"]


# -- 4. an undeclared tool call is an error (run.rs) ---------------------------------------------


def test_an_undeclared_tool_call_is_an_error_to_the_model(built, model_server, tmp_path, home):
    server = model_server([{"tool_use": {"name": "undeclared-tool", "input": {}}}, {"text": "ok"}])
    manifest = agent(tmp_path / "cap", server.url, built)
    proc, session = run_json(manifest, home, "-t", "call something")
    assert proc.returncode == 0, proc.stderr
    [block] = server.message_requests()[1].body["messages"][-1]["content"]
    assert block["is_error"] is True and "tool 'undeclared-tool' is not declared in manifest allowlist" in json.dumps(block)
    assert events(session, "tool_call")[0]["status"] == "error"


# -- 5. murmur.lock pins what run stages (run.rs, install_lock.rs) --------------------------------


def test_run_stages_the_version_murmur_lock_pins(built, model_server, tmp_path, home):
    project = tmp_path / "cap"
    server = model_server([{"text": "one"}, {"text": "two"}])
    tools = "  - name: echo-tool\n    version: 0.2.0\n    runtime: tool\n"
    manifest = agent(project, server.url, built, tools=tools)
    zipped = wasm_zip(tmp_path, "echo-tool", "0.2.0", built["probe_wasm"])
    assert mur("install", str(zipped), cwd=project, home=home).returncode == 0
    proc, _ = run_json(manifest, home, "-t", "first")  # creates murmur.lock, pinning 0.2.0
    assert proc.returncode == 0, proc.stderr
    assert "resolved_version: 0.2.0" in (project / "murmur.lock").read_text()
    manifest.write_text(manifest.read_text().replace("version: 0.2.0", "version: 0.1.0"))  # only 0.2.0 installed
    proc, session = run_json(manifest, home, "-t", "second")
    assert proc.returncode == 0, proc.stderr
    assert "**echo-tool** (v0.2.0, tool)" in (session / "work" / "MURMUR.md").read_text()
    (project / "murmur.lock").write_text("lock_version: 1\nartifacts: []\n")
    proc, session = run_json(manifest, home, "-t", "third")
    assert proc.returncode == 1 and session is None
    assert proc.stderr.startswith("error[E-RUN-003]: murmur.lock missing artifact entry for 'echo-tool'")


def test_a_missing_artifact_is_upstreams_e_run_008_wording(built, tmp_path, home):
    manifest = agent(tmp_path / "cap", "http://127.0.0.1:9", built,
                     tools="  - name: missing-tool\n    version: 0.0.1\n    runtime: tool\n")
    proc, session = run_json(manifest, home, "-t", "x")
    assert proc.returncode == 1 and session is None
    assert proc.stderr.startswith("error[E-RUN-008]: missing artifacts: missing-tool@0.0.1\n  hint: run `mur install`")
    assert not (tmp_path / "cap" / "workdir").exists()


# -- 6. shell tools see the identity variables (identity.rs) ------------------------------------


@pytest.mark.requires_root
@pytest.mark.requires_landlock
def test_shell_tools_see_the_capsule_identity(built, model_server, tmp_path, home):
    command = 'printf "%s\\n%s\\n%s\\n%s\\n" "$MURMUR_CAPSULE_NAME" "$MURMUR_CAPSULE_VERSION" "$MURMUR_SESSION_ID" "$MURMUR_CAPSULE_URL"'
    server = model_server([{"tool_use": {"name": "bash", "id": "toolu_env", "input": {"command": command}}},
                           {"text": "env captured"}])
    manifest = agent(tmp_path / "cap", server.url, built, caps=BASH)
    proc, session = run_json(manifest, home, "-t", "Echo identity env.")
    assert proc.returncode == 0, proc.stderr
    [block] = server.message_requests()[1].body["messages"][-1]["content"]
    stdout = json.loads(block["content"][0]["text"])["data"].splitlines()
    assert stdout[:3] == ["compat-agent", "0.2.0", session.name] and stdout[3].startswith("localhost:")


# -- 7. driver continuation (continuation.rs) ---------------------------------------------------


@pytest.mark.requires_root
@pytest.mark.requires_landlock
def test_a_held_continuation_sends_only_the_new_messages(built, tmp_path, home):
    tokens = {}
    for mode, wire in (("continuation", "wire_n=2 cont=cont-echo-1"), ("nocont", "wire_n=3 cont=none")):
        manifest = agent(tmp_path / mode, "http://127.0.0.1:9", built, driver="compat-driver", caps=BASH,
                         inference=f"    config:\n      mode: {mode}\n")
        proc, session = run_json(manifest, home, "-t", "Please echo hello.")
        assert proc.returncode == 0, proc.stderr
        assert (session / "out" / "result.txt").read_text() == wire
        tokens[mode] = [e["input_tokens"] for e in events(session, "inference")]
    # the accounting never sees the smaller wire: the same growth with and without continuation
    assert tokens["continuation"] == tokens["nocont"] and len(tokens["nocont"]) == 2
    assert tokens["nocont"][1] > tokens["nocont"][0]


# -- 8. compaction is the hook's (compaction.rs) ------------------------------------------------


def test_without_a_compaction_hook_the_budget_is_only_logged(built, model_server, tmp_path, home):
    server = model_server([{"tool_use": {"name": "probe", "input": {"op": "echo", "payload": 1}},
                            "usage": {"input_tokens": 50, "output_tokens": 50}},
                           {"text": "Task complete.", "usage": {"input_tokens": 50, "output_tokens": 50}}])
    manifest = agent(tmp_path / "cap", server.url, built, tools=PROBE.format(built["probe"]),
                     top="context:\n  max_tokens: 200\n", inference="  compaction:\n    threshold: 0.01\n")
    proc, session = run_json(manifest, home, "-t", "Run echo and summarize.")
    assert proc.returncode == 0, proc.stderr
    assert len(server.message_requests()) == 2  # no summarising call of mur's own
    assert "no hook returned replace-context" in (session / "logs" / "bootstrap.log").read_text()
    assert not events(session, "compaction")
    assert "- Context budget: 200 tokens (compaction not configured)" in (session / "work" / "MURMUR.md").read_text()


# -- 9. system prompt rules (system_prompt.rs) --------------------------------------------------


def _skill(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "skill.md").write_text("# House style\nAlways answer in haiku.")
    return path


def test_cli_system_prompt_rules(built, model_server, tmp_path, home):
    skill = _skill(tmp_path / "house-style")
    tools = f"  - name: house-style\n    runtime: skill\n    source: {skill}\n    local_source: true\n"
    bound = "  system_prompt_artifact: house-style\n"

    def run(inference: str, *flags: str) -> tuple[dict, Path, dict]:
        server = model_server([{"text": "ok"}])
        manifest = agent(tmp_path / f"cap{len(list(tmp_path.iterdir()))}", server.url, built, tools=tools,
                         inference=inference)
        proc, session = run_json(manifest, home, "-t", "hi", *flags)
        assert proc.returncode == 0, proc.stderr
        return server.message_requests()[0].body, session, events(session, "session_start")[0]

    body, session, start = run(bound)  # the bound skill is the prompt, not a tool
    assert "Always answer in haiku." in body["system"] and "house-style" not in [t["name"] for t in body.get("tools", [])]
    assert body["system"].startswith("[Capsule]\nName: compat-agent\nVersion: 0.2.0\n")
    assert "*(bound as system prompt — already in context, not separately callable)*" in (
        session / "work" / "MURMUR.md").read_text()
    body, session, start = run(bound, "--system-prompt", "CLI prompt")  # released back to a callable skill
    assert "CLI prompt" in body["system"] and "haiku" not in body["system"]
    assert "house-style" in [t["name"] for t in body["tools"]] and start["system_prompt_source"] == "cli"
    assert "bound as system prompt" not in (session / "work" / "MURMUR.md").read_text()
    body, _, start = run('  system_prompt: "Manifest prompt"\n', "--system-prompt", "   ")  # blank clears
    assert "Manifest prompt" not in body["system"]
    assert (start["system_prompt_source"], start["system_prompt_sha256"]) == ("cli", None)
    _, _, start = run("  system_prompt_file: missing.md\n", "--system-prompt", "  \n CLI prompt \n\n ")
    assert start["system_prompt_sha256"] == hashlib.sha256(b"CLI prompt").hexdigest()  # trimmed; file not read


def test_system_prompt_flag_without_inference_is_refused_before_staging(tmp_path, home):
    project = tmp_path / "plain"
    project.mkdir()
    (project / "murmur.yaml").write_text("name: script-capsule\nversion: 0.1.0\n")
    proc = mur("run", "-m", str(project / "murmur.yaml"), "--system-prompt", "CLI prompt", cwd=project, home=home)
    assert proc.returncode == 1
    assert proc.stderr.startswith(
        "error[E-IO-003]: --system-prompt requires an agent capsule: this manifest has no inference: block\n")
    assert not (project / "workdir").exists()


# -- 11. components built against upstream's WIT (wasi:http) -------------------------------------


def test_a_wasi_http_tool_runs_in_a_session_held_to_the_allow_list(built, model_server, tmp_path, home):
    from wasmtime import wat2wasm

    wasm = tmp_path / "wasi-http.wasm"
    wasm.write_bytes(wat2wasm((ROOT / "tests" / "wasm" / "guests" / "wasi_http" / "probe.wat").read_text()))
    http_tool = tool_dir(tmp_path / "wasi-http", "wasi-http", "tool", wasm)
    server = model_server([{"tool_use": {"name": "wasi-http", "input": {}}}, {"text": "done"}])
    manifest = agent(tmp_path / "cap", server.url, built,
                     tools=f"  - name: wasi-http\n    runtime: tool\n    source: {http_tool}\n    local_source: true\n")
    data = yaml.safe_load(manifest.read_text())
    data["capabilities"]["network"]["allow"] = [server.url]  # the model server's port only
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    proc, session = run_json(manifest, home, "-t", "fetch")
    assert proc.returncode == 0, proc.stderr
    # the tool's input data is the call's JSON ("{}"): an authority that is not allowed -> denied
    [denied] = events(session, "network_denied")
    assert denied["artifact"] == "wasi-http" and "not in capabilities.network.allow" in denied["reason"]
    assert '"summary":"denied"' in json.dumps(server.message_requests()[1].body["messages"][-1]).replace("\\", "")
