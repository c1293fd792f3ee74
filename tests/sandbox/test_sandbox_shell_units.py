"""Shell-tool pieces that need no kernel: environment, manifests, attribution, output capture."""

from __future__ import annotations

import signal

import pytest
import yaml

from mur.manifest.capsule import Capabilities
from mur.sandbox import output, shell
from mur.sandbox.shell import ShellResult


def caps(**shell_caps) -> Capabilities:
    shell_caps.setdefault("allow", ["bash"])
    return Capabilities.model_validate({"shell": shell_caps}, strict=False)


HOST = {
    "PATH": "/usr/bin:/bin", "HOME": "/root", "USER": "root", "LANG": "C.UTF-8", "TERM": "xterm",
    "TMPDIR": "/tmp", "CARGO_HOME": "/c", "EDITOR": "vim", "SSH_AUTH_SOCK": "/run/agent",
    "ANTHROPIC_API_KEY": "sk-ant-1", "GITHUB_TOKEN": "ghp_1", "AWS_SECRET_ACCESS_KEY": "a", "AWS_REGION": "eu",
    "DOCKER_HOST": "unix:///x", "MY_API_KEY": "k", "KUBECONFIG": "/k", "MYAPP_URL": "http://x", "MYAPP_DEBUG": "1",
}


def test_env_keeps_the_baseline_and_forces_home(tmp_path):
    env = shell.shell_env(caps(), tmp_path, HOST)
    assert env == {
        "PATH": "/usr/bin:/bin", "USER": "root", "LANG": "C.UTF-8", "TERM": "xterm", "TMPDIR": "/tmp",
        "CARGO_HOME": "/c", "HOME": str(tmp_path / ".capsule-home"), "USERPROFILE": str(tmp_path / ".capsule-home"),
    }


def test_env_baseline_globs_add_and_strip_and_credentials_win(tmp_path):
    env = shell.shell_env(caps(baseline_env=["MYAPP_*", "AWS_*", "GITHUB_TOKEN"], strip_env=["MYAPP_DEBUG", "TERM"]),
                          tmp_path, HOST)
    assert env["MYAPP_URL"] == "http://x"
    assert "MYAPP_DEBUG" not in env and "TERM" not in env  # strip_env beats baseline
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_REGION", "GITHUB_TOKEN"):  # the credential backstop beats everything
        assert name not in env
    assert not {"ANTHROPIC_API_KEY", "DOCKER_HOST", "MY_API_KEY", "KUBECONFIG", "EDITOR", "SSH_AUTH_SOCK"} & set(env)


def test_synthetic_tool_manifest_shape():
    m = shell.synthetic_tool_manifest("jq")
    assert {k: m[k] for k in ("name", "version", "runtime", "implementation")} == {
        "name": "jq", "version": "0.0.0", "runtime": "tool", "implementation": "native"}
    assert m["input_schema"] == {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    assert "bash -c" in shell.synthetic_tool_manifest("bash")["description"]


def test_synthetic_manifests_are_written_per_binary(tmp_path):
    paths = shell.write_synthetic_tool_manifests(tmp_path / "tools", ["bash", "jq"])
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == ["tools/bash/murmur.yaml", "tools/jq/murmur.yaml"]
    assert yaml.safe_load(paths[1].read_text())["name"] == "jq"
    assert sorted(p.name for p in (tmp_path / "tools" / "jq").iterdir()) == ["murmur.yaml"]


@pytest.mark.parametrize(("sig", "timed_out", "before", "after", "cpu", "expected"), [
    (signal.SIGXCPU, False, (0, 0), (0, 0), 0.0, "cpu_seconds"),
    (signal.SIGKILL, False, (0, 0), (0, 0), 2.0, "cpu_seconds"),  # RLIMIT_CPU with cur == max kills
    (signal.SIGKILL, False, (0, 0), (0, 0), 1.8, "cpu_seconds"),  # rusage a tick-sampled 0.2 s short
    (signal.SIGKILL, False, (0, 0), (0, 0), 1.7, None),  # too far under the limit: not that
    (signal.SIGKILL, False, (0, 0), (0, 0), 0.1, None),  # a SIGKILL with no evidence
    (signal.SIGKILL, True, (0, 0), (0, 0), 2.0, None),  # we killed it (timeout)
    (signal.SIGXFSZ, False, (0, 0), (0, 0), 0.0, "max_file_size_bytes"),
    (signal.SIGKILL, False, (2, 5), (3, 5), 0.0, "cgroup_memory_bytes"),
    (None, False, (0, 5), (0, 9), 0.0, "cgroup_pids_max"),
    (None, True, (0, 5), (0, 9), 0.0, "cgroup_pids_max"),  # a fork bomb we had to stop
    (signal.SIGKILL, False, (0, 0), (1, 1), 0.0, None),  # two limits: ambiguous, not guessed
    (signal.SIGXFSZ, False, (0, 0), (1, 0), 0.0, None),
    (None, False, (0, 0), (0, 0), 0.0, None),
])
def test_attribution(sig, timed_out, before, after, cpu, expected):
    assert shell.attribute(sig, timed_out, before, after, cpu, 2) == expected


def result(**kw) -> ShellResult:
    base = dict(exit_code=137, stdout="", stderr="", truncated=False, full_output_path=None, duration_ms=5,
                stdout_bytes=0, stderr_bytes=0, binary="/usr/bin/python3.11", command="python3 -c x",
                resource_limit="cgroup_memory_bytes")
    base.update(kw)
    return ShellResult(**base)


def test_limit_error_is_e_run_011():
    err = shell.limit_error(result())
    assert err.code == "E-RUN-011"
    assert err.message == ("shell subprocess 'python3.11' was killed for exceeding "
                           "capabilities.resources.cgroup_memory_bytes")
    assert shell.limit_error(result(resource_limit=None)) is None


def test_trace_fields():
    event = shell.shell_trace_fields(result(), turn=3)
    assert event == {"event_type": "shell", "turn": 3, "binary": "/usr/bin/python3.11", "command": "python3 -c x",
                     "exit_code": 137, "stdout_bytes": 0, "stderr_bytes": 0, "duration_ms": 5,
                     "resource_limit": "cgroup_memory_bytes"}
    assert "resource_limit" not in shell.shell_trace_fields(result(resource_limit=None), turn=0)


def test_cut_never_splits_utf8():
    text = "é" * 10000  # 2 bytes each
    cut = output.cut(text.encode(), 16385)
    assert cut == "é" * 8192 and "\ufffd" not in cut


def test_capture_keeps_a_head_and_spools_the_rest(tmp_path):
    cap = output.Capture(str(tmp_path), cap=100_000)
    for _ in range(50):
        cap.feed(b"x" * 1000)
    assert cap.total == 50_000 and len(cap.head) == output.OUTPUT_LIMIT + 4
    out = tmp_path / "log"
    with open(out, "wb") as fh:
        cap.copy_to(fh)
    assert out.stat().st_size == 50_000
    assert list(tmp_path.iterdir()) == [out]  # the spool file is unnamed
    small = output.Capture(str(tmp_path), cap=10)
    small.feed(b"y" * 25)
    with open(out, "wb") as fh:
        small.copy_to(fh)
    assert out.read_bytes().startswith(b"y" * 10) and b"15 further bytes discarded" in out.read_bytes()
    cap.close()
    small.close()


def test_run_refuses_binaries_outside_the_allow_list(tmp_path):
    sb = shell.ShellSandbox(caps(), tmp_path, "ses_x", [])
    with pytest.raises(shell.MurError) as info:
        sb.run("python3", command="print(1)")
    assert info.value.code == "E-RUN-015" and "capabilities.shell.allow" in info.value.message
    with pytest.raises(shell.MurError, match="not running"):
        sb.run("bash", command="true")


def test_argv_forms():
    from mur.sandbox.binaries import Binary, call_argv

    bash = Binary("bash", "/usr/bin/bash", "/usr/bin/bash")
    jq = Binary("jq", "/usr/bin/jq", "/usr/bin/jq")
    assert call_argv(bash, "echo 'a b' | cat", None) == (["bash", "-c", "echo 'a b' | cat"], "echo 'a b' | cat")
    assert call_argv(jq, "jq -r '.a b' in.json", None) == (["jq", "-r", ".a b", "in.json"], "jq -r '.a b' in.json")
    assert call_argv(jq, "-r .x", None)[0] == ["jq", "-r", ".x"]
    assert call_argv(bash, None, ["-c", "echo hi"]) == (["bash", "-c", "echo hi"], "bash -c 'echo hi'")
    with pytest.raises(shell.MurError, match="cannot split"):
        call_argv(jq, "jq 'unterminated", None)


def test_environment_only_tier_warns_and_still_runs_with_rlimits(tmp_path):
    """A host with no kernel enforcement (what macOS gets): W-SEC-001/003/010, rlimits only."""
    from mur.sandbox.probe import classify

    c = Capabilities.model_validate({"shell": {"allow": ["bash"]}, "network": {"allow": ["example.com"]},
                                     "resources": {"max_open_files": 77}}, strict=False)
    sb = shell.ShellSandbox(c, tmp_path, "ses_env_only", [], probe=classify("darwin", 0, False, None, "none", False, False),
                            host_env={"PATH": "/usr/bin:/bin"})
    warnings = sb.start()
    try:
        assert [code for code, _ in warnings] == ["W-SEC-001", "W-SEC-003", "W-SEC-010"]
        assert "no per-process memory bound" in warnings[2][1]
        assert sb.cgroup is None and sb.policy.landlock is None and sb.policy.seccomp is None
        r = sb.run("bash", command="ulimit -Hn; ulimit -Sn; ulimit -c")
        assert r.stdout == "77\n77\n0\n" and r.exit_code == 0
    finally:
        sb.close()


def test_binaries_are_never_found_in_the_tools_workdir_or_through_relative_path_entries(tmp_path, monkeypatch):
    """A previous session's tools can plant `cat` in the workdir; a PATH naming it (or `.`, mur's cwd)
    must not make mur grant the plant execute as the allowed binary. Control: /usr/bin's cat is found."""
    import os

    workdir = tmp_path / "work"
    (workdir / "bin").mkdir(parents=True)
    for where in (workdir / "bin", workdir):
        (where / "cat").write_text("#!/bin/sh\necho planted\n")
        (where / "cat").chmod(0o755)
    monkeypatch.chdir(workdir)
    from mur.sandbox.binaries import resolve

    notes: list[str] = []
    found = resolve(caps(allow=["cat"]), {"PATH": f"{workdir / 'bin'}:.:/usr/bin:/bin"}, str(workdir.resolve()),
                    with_closure=False, log=notes.append)
    assert os.path.realpath(found["cat"].path) == os.path.realpath("/usr/bin/cat")
    assert any("inside the tools' workdir" in n for n in notes) and any("relative" in n for n in notes)
    control = resolve(caps(allow=["cat"]), {"PATH": f"{workdir / 'bin'}:/usr/bin"}, str((tmp_path / "other").resolve()),
                      with_closure=False, log=notes.append)
    assert control["cat"].path == str(workdir / "bin" / "cat")  # outside this session's workdir: found


def test_the_spawner_forks_under_a_tight_cpu_limit():
    """RLIMIT_CPU counts the spawner's own start: below CARRY_MIN_CPU it forks for each call."""
    from mur.sandbox import zygote

    assert zygote.carries_limits([("CPU", 60), ("NOFILE", 1024)])
    assert not zygote.carries_limits([("CPU", 1), ("NOFILE", 1024)])
    assert zygote.carries_limits([("CPU", -1)])
