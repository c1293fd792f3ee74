"""The pre-checks mur run makes before a workdir exists (mur.session.launch_checks): the inference driver
(E-RUN-005/006), `inference.command` on PATH (E-RUN-006), and the prompt files (E-RUN-009)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mur.errors import MurError
from mur.manifest import load_capsule
from mur.resolve.capsule import resolve_loaded
from mur.session import launch_checks as checks


@dataclass
class Loaded:
    """A capsule of `text` (murmur.yaml in tmp_path), resolved as `mur run` resolves it: what the checks take."""

    capsule: Any
    dir: Path
    resolved: Any  # mur.resolve.capsule.ResolvedCapsule
    system_prompt: str | None = None  # --system-prompt


def checked(tmp_path, text: str, system_prompt: str | None = None) -> Loaded:
    manifest = tmp_path / "murmur.yaml"
    manifest.write_text("name: c\nversion: '1'\n" + text)
    loaded = load_capsule(manifest)
    return Loaded(loaded.capsule, loaded.dir, resolve_loaded(loaded, hashed=False), system_prompt)


def error_of(fn, *args) -> MurError:
    with pytest.raises(MurError) as err:
        fn(*args)
    return err.value


DRIVER = Path(__file__).resolve().parents[2] / "examples" / "murmur-driver-anthropic"
HTTP = "inference:\n  transport: http\n  model: m\n"


def prompts(tmp_path, text: str, **options) -> checks.Prompts:
    run = checked(tmp_path, text, **options)
    return checks.read_prompts(run.system_prompt, run.resolved)


def inference(run: Loaded) -> str | None:
    return checks.check_inference(run.capsule, run.resolved.artifacts)


# --- prompts -----------------------------------------------------------------------------------


def test_inline_prompt_and_source(tmp_path):
    run = prompts(tmp_path, HTTP + "  system_prompt: \"  Be strict.\\n\"\n")
    assert (run.system, run.source) == ("  Be strict.\n", "manifest")
    assert prompts(tmp_path, HTTP).source == "none"
    none = prompts(tmp_path, "")
    assert (none.system, none.source) == (None, "none")
    assert prompts(tmp_path, HTTP, system_prompt="From the CLI.").source == "cli"


def test_prompt_file_is_read_verbatim_relative_to_the_manifest(tmp_path):
    (tmp_path / "conventions.md").write_text("\n  keep whitespace  \n\n")
    assert prompts(tmp_path, HTTP + "  system_prompt_file: conventions.md\n").system == "\n  keep whitespace  \n\n"


def test_unreadable_prompt_file_is_e_run_009(tmp_path):
    err = error_of(prompts, tmp_path, HTTP + "  system_prompt_file: missing.md\n")
    assert err.code == "E-RUN-009"
    assert err.message.startswith(f"failed to read inference.system_prompt_file at {tmp_path / 'missing.md'}")
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe\x00bad")
    assert error_of(prompts, tmp_path, HTTP + "  system_prompt_file: binary.md\n").code == "E-RUN-009"


ARTIFACT = HTTP + "  system_prompt_artifact: reviewer\nartifacts:\n  - {name: reviewer, runtime: skill, source: %s}\n"


def test_prompt_artifact_text(tmp_path):
    (tmp_path / "skill.md").write_text("# Reviewer\nReview carefully.")
    assert prompts(tmp_path, ARTIFACT % "./skill.md").system == "# Reviewer\nReview carefully."
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "SKILL.md").write_text("# In a folder")
    assert prompts(tmp_path, ARTIFACT % "./dir").system == "# In a folder"


def test_unreadable_prompt_artifact_is_e_run_009(tmp_path):
    (tmp_path / "skill.md").write_bytes(b"\xff\xfe\x00bad")
    err = error_of(prompts, tmp_path, ARTIFACT % "./skill.md")
    assert err.code == "E-RUN-009" and "system_prompt_artifact 'reviewer'" in err.message


def test_a_prompt_and_a_prompt_artifact_together_are_refused_at_load(tmp_path):
    (tmp_path / "skill.md").write_text("# Reviewer")
    err = error_of(checked, tmp_path, (ARTIFACT % "./skill.md").replace("  model: m\n", "  model: m\n  system_prompt: First.\n"))
    assert err.code == "E-MAN-003"
    assert "at most one of system_prompt, system_prompt_file, system_prompt_artifact may be set" in err.message


def test_compaction_prompt(tmp_path):
    compaction = "inference:\n  transport: http\n  model: m\n  compaction:\n    threshold: 0.8\n    %s\n"
    assert prompts(tmp_path, compaction % "system_prompt: sum up").compaction == "sum up"
    (tmp_path / "c.md").write_text("from file")
    assert prompts(tmp_path, compaction % "system_prompt_file: c.md").compaction == "from file"
    assert prompts(tmp_path, HTTP).compaction is None
    err = error_of(prompts, tmp_path, compaction % "system_prompt_file: no.md")
    assert err.code == "E-RUN-009" and "inference.compaction.system_prompt_file" in err.message


# --- the inference driver and the CLI ---------------------------------------------------------


def test_driver_missing_undeclared_or_not_installed(tmp_path):
    err = error_of(inference, checked(tmp_path, HTTP))
    assert err.code == "E-RUN-005" and "inference.driver.artifact" in err.message
    undeclared = HTTP + "  driver: {artifact: d}\n"
    err = error_of(inference, checked(tmp_path, undeclared))
    assert err.code == "E-RUN-005" and "not declared" in err.message
    declared = undeclared + f"artifacts:\n  - {{name: d, version: 0.1.0, runtime: driver, source: {DRIVER}, local_source: true}}\n"
    run = checked(tmp_path, declared)
    assert inference(run) is None  # declared and staged from its source: passes
    err = error_of(checks.check_inference, run.capsule, {})  # the same capsule, nothing located
    assert err.code == "E-RUN-006" and err.message == "inference driver 'd' is not installed in the local tool registry"
    assert err.hint == "run `mur install d@0.1.0`"


def test_command_not_on_path_is_e_run_006_and_found_is_resolved(tmp_path, monkeypatch):
    process = "inference:\n  transport: process\n  model: m\n  command: my-claude\n"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    err = error_of(inference, checked(tmp_path, process))
    assert err.code == "E-RUN-006" and err.message == "inference.command 'my-claude' was not found on PATH"
    assert "claude CLI" in err.hint and "@anthropic-ai/claude-code" in err.hint
    exe = tmp_path / "my-claude"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + "/usr/bin")
    assert inference(checked(tmp_path, process)) == str(exe)


# --- --system-prompt (upstream's rules) --------------------------------------------------------


def test_cli_prompt_is_trimmed_and_a_blank_one_clears_the_manifest_prompt(tmp_path):
    run = prompts(tmp_path, HTTP + "  system_prompt: Manifest prompt\n", system_prompt="  \n CLI prompt \n\n ")
    assert (run.system, run.source) == ("CLI prompt", "cli")
    run = prompts(tmp_path, HTTP + "  system_prompt: Manifest prompt\n", system_prompt="   ")
    assert (run.system, run.source) == (None, "cli")


def test_cli_prompt_replaces_a_file_that_does_not_exist_without_reading_it(tmp_path):
    run = prompts(tmp_path, HTTP + "  system_prompt_file: missing.md\n", system_prompt="CLI prompt")
    assert (run.system, run.bound_skill) == ("CLI prompt", None)


def test_a_skill_used_as_the_prompt_is_bound_unless_the_cli_overrides_it(tmp_path):
    (tmp_path / "style.md").write_text("Always answer in haiku.")
    skill = "artifacts:\n  - name: style\n    runtime: skill\n    source: style.md\n    local_source: true\n"
    run = prompts(tmp_path, skill + HTTP + "  system_prompt_artifact: style\n")
    assert (run.system, run.bound_skill) == ("Always answer in haiku.", "style")
    run = prompts(tmp_path, skill + HTTP + "  system_prompt_artifact: style\n", system_prompt="CLI prompt")
    assert (run.system, run.bound_skill) == ("CLI prompt", None)


def test_system_prompt_flag_needs_an_inference_block(tmp_path):
    err = error_of(checks.check_system_prompt_flag, "CLI prompt", checked(tmp_path, "").capsule)
    assert err.code == "E-IO-003"
    assert err.message == "--system-prompt requires an agent capsule: this manifest has no inference: block"
    checks.check_system_prompt_flag("CLI prompt", checked(tmp_path, HTTP).capsule)  # fine with one
