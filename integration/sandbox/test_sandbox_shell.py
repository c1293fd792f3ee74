"""ShellSandbox behaviour on the real kernel: output handling, forms, timeouts, tiers, refusal, cleanup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from sbx_support import HOST_ENV, capabilities  # type: ignore[import-not-found]
from mur.errors import MurError
from mur.manifest.capsule import Capabilities
from mur.sandbox.probe import classify, probe_host
from mur.sandbox.shell import OUTPUT_LIMIT, ShellSandbox, shell_trace_fields

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]


def test_output_is_cut_at_16_kib_with_the_full_log_in_the_workdir(sandbox):
    sb = sandbox()
    r = sb.run("python3", args=["-c", "import sys\nprint('o' * 40000)\nsys.stderr.write('e' * 100)"])
    assert r.exit_code == 0 and r.truncated
    assert len(r.stdout.encode()) == OUTPUT_LIMIT and r.stdout_bytes == 40001 and r.stderr == "e" * 100
    log = r.full_output_path
    assert log is not None and os.path.dirname(log) == str(sb.workdir / "logs")
    assert os.path.basename(log).startswith("shell-") and log.endswith(".log")
    text = open(str(sb.live_workdir) + log[len(str(sb.workdir)):]).read()  # on the session disk until close()
    assert "o" * 40000 in text and "e" * 100 in text
    small = sb.run("bash", command="echo small")
    assert not small.truncated and small.full_output_path is None and small.stdout == "small\n"


def test_command_and_args_forms_env_and_stdin(sandbox):
    sb = sandbox()
    (sb.live_workdir / "f.txt").write_text("content\n")  # the tools' workdir as the runtime reaches it
    assert sb.run("cat", command="cat f.txt").stdout == "content\n"
    assert sb.run("cat", command="f.txt").stdout == "content\n"
    r = sb.run("bash", args=["-c", 'echo "$0 $1 $FOO ${GITHUB_TOKEN-none} $HOME"', "a", "b"],
               env=[("FOO", "bar"), ("GITHUB_TOKEN", "ghp_x"), ("HOME", "/etc")])
    assert r.stdout == f"a b bar none {sb.workdir}/.capsule-home\n"
    assert r.command == "bash -c 'echo \"$0 $1 $FOO ${GITHUB_TOKEN-none} $HOME\"' a b"
    assert sb.run("cat", args=[], stdin=b"from stdin").stdout == "from stdin"
    assert sb.run("bash", command="echo $UID").stdout.strip() == str(sb.policy.run_as[0])  # the session's own uid
    fields = shell_trace_fields(r, turn=2)
    assert fields["binary"] == os.path.realpath("/usr/bin/bash") and fields["exit_code"] == 0
    assert "resource_limit" not in fields


def test_home_and_logs_are_usable(sandbox):
    sb = sandbox()
    r = sb.run("bash", command='cd "$HOME" && echo persisted > note && cat "$HOME/note"')
    assert r.exit_code == 0 and r.stdout == "persisted\n"
    assert (sb.live_workdir / ".capsule-home" / "note").read_text() == "persisted\n"
    sb.close()
    assert (sb.workdir / ".capsule-home" / "note").read_text() == "persisted\n"  # brought back to the host


def test_timeout_kills_the_call(sandbox):
    sb = sandbox()
    began = time.monotonic()
    r = sb.run("python3", args=["-c", "import time; time.sleep(30)"], timeout=1)
    assert r.timed_out and r.exit_code == 137 and r.resource_limit is None
    assert "timed out after 1s" in r.stderr and time.monotonic() - began < 15


def test_background_jobs_end_with_the_call_and_daemons_with_the_session(sandbox):
    sb = sandbox()
    r = sb.run("bash", command="python3 -c 'import time; time.sleep(60)' & echo started")
    assert r.stdout == "started\n"
    until = time.monotonic() + 5
    while sb.tool_pids() and time.monotonic() < until:
        time.sleep(0.05)
    assert sb.tool_pids() == set()  # the call's process group was killed when it returned
    # the parent waits for the child's setsid(): until then the child is in the call's group, which goes at its end
    daemon = sb.run("python3", args=["-c", (
        "import os, sys, time\nr, w = os.pipe()\nif os.fork(): os.read(r, 1); sys.exit(0)\n"
        "os.setsid()\nos.write(w, b'x')\nos.close(1); os.close(2)\ntime.sleep(60)")])
    assert daemon.exit_code == 0
    time.sleep(0.2)
    assert len(sb.tool_pids()) == 1  # escaped its process group, not the cgroup: close() kills it


def test_unresolved_binary_and_refusals(sandbox):
    sb = sandbox(capabilities(allow=("bash", "mur-no-such-tool")))
    r = sb.run("mur-no-such-tool", command="--help")
    assert r.exit_code == 127 and "not found on PATH" in r.stderr and r.binary == "mur-no-such-tool"
    with pytest.raises(MurError) as info:
        sb.run("python3", command="x")
    assert info.value.code == "E-RUN-015"
    sb.close()
    sb.close()  # idempotent
    with pytest.raises(MurError, match="not running"):
        sb.run("bash", command="true")


def test_full_tier_warning_states_scope_network_sockets_and_processes(sandbox, tcp_listeners):
    port = tcp_listeners[0]
    notes: list[str] = []
    sb = sandbox(network_allow=[f"localhost:{port}", "https://nowhere.invalid"], log=notes.append)
    codes = [c for c, _ in sb.warnings]
    assert codes == ["W-SEC-005"]
    text = sb.warnings[0][1]
    assert f"network only through mur's egress proxy (HTTP(S)_PROXY, in a private network namespace) to exactly " \
           f"[localhost:{port}]" in text
    assert "AF_UNIX sockets are refused" in text and f"tools run as uid {sb.policy.run_as[0]}" in text
    assert "landlock+seccomp" in text and "bash, cat, python3" in text
    assert any("nowhere.invalid" in n and "did not resolve" in n for n in notes)
    assert any("network netns+egress-proxy, processes session-uid, namespaces net+ipc+mnt+pid" in n for n in notes)


def test_without_a_namespace_the_port_rules_fallback_says_so(sandbox, tcp_listeners):
    """A host that cannot create the namespace (probe says so): Landlock's port rules, stated."""
    port = tcp_listeners[0]
    probe = classify("linux", probe_host().landlock_abi, True, None, "hybrid", True, False, root=True, netns=False)
    sb = sandbox(network_allow=[f"localhost:{port}"], probe=probe)
    assert sb.policy.network.mode == "ports" and sb.policy.namespaces == ()
    text = sb.warnings[0][1]
    assert f"no private network namespace on this host, so TCP connect is limited by port only: port(s) {port} on " \
           "ANY address" in text
    read = f"exec 3<>/dev/tcp/127.0.0.1/{port} && read -r l <&3 && echo \"$l\""
    assert sb.run("bash", command=read).stdout == "hello\n"  # any address on the allowed port: the fallback's gap


def test_two_sessions_have_separate_cgroups(sandbox, workdir):
    a = sandbox()
    b = ShellSandbox(capabilities(), workdir, "ses_second_session", [], host_env=HOST_ENV)
    b.start()
    try:
        assert set(a.cgroup.dirs.values()).isdisjoint(b.cgroup.dirs.values())
        assert b.run("bash", command="echo b").stdout == "b\n"
    finally:
        b.close()
    assert all(not os.path.exists(d) for d in b.cgroup.dirs.values())
    assert a.run("bash", command="echo a").stdout == "a\n"


def test_seccomp_only_tier_still_filters_sockets(sandbox, outside):
    probe = classify("linux", 0, True, "simulated: Landlock unavailable", "hybrid", True, False)
    sb = sandbox(probe=probe)
    assert [c for c, _ in sb.warnings] == ["W-SEC-002"]
    # what W-SEC-002 warns about: no filesystem scope on this tier
    assert sb.run("cat", command=f"cat {outside}/secret.txt").stdout == "outside-secret\n"
    r = sb.run("python3", args=["-c", "import socket; socket.socket(socket.AF_UNIX)"])
    assert r.exit_code == 1 and "Permission denied" in r.stderr
    assert sb.run("bash", command="ulimit -Hn").stdout == "1024\n"


CGROUPLESS = ("import json, sys\nfrom pathlib import Path\nfrom mur.manifest.capsule import Capabilities\n"
              "from mur.sandbox.shell import ShellSandbox\nfrom mur.errors import MurError\n"
              "from mur.sandbox.probe import probe_host\n"
              "caps = Capabilities.model_validate({'shell': {'allow': ['bash']}}, strict=False)\n"
              "try:\n    ShellSandbox(caps, Path(sys.argv[1]), 'ses_nocg', []).start(); print('started')\n"
              "except MurError as e:\n    print(json.dumps([e.code, e.message, e.hint, probe_host().cgroup_mode]))")


def test_refused_with_e_run_012_when_no_cgroup_can_be_made(workdir):
    """A real host without cgroups: a private mount namespace with /sys/fs/cgroup unmounted."""
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot create a mount namespace here")
    script = f"umount -R /sys/fs/cgroup && exec {sys.executable} -c \"$0\" {workdir}"
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, CGROUPLESS],
                         capture_output=True, text=True, timeout=60)
    code, message, hint, mode = json.loads(out.stdout.strip().splitlines()[-1])
    assert code == "E-RUN-012" and mode == "none"
    assert "aggregate memory/pids bound" in message
    assert hint.startswith("the systemd user unit `mur` runs under needs `Delegate=yes` for memory, pids, cpu and io")
    assert "has no memory limit it could not change" in message  # nor an enclosing bound to stand in
    assert os.listdir(workdir) == []  # refused before touching the workdir


def test_probe_reports_this_host():
    probe = probe_host()
    assert probe.os == "linux" and probe.tier == "full" and probe.achieved in ("scoped", "sealed")
    assert (probe.achieved == "sealed") == probe.sealed and (probe.sealed_reason is None) == probe.sealed
    assert probe.landlock_abi >= 1 and probe.seccomp and probe.cgroup_delegated


def test_spawn_only_capsules_get_the_aggregate_bound_too(workdir):
    """spec: any native-subprocess capability (not only shell.allow) needs the cgroup (E-RUN-012)."""
    caps = Capabilities.model_validate({"spawn": {"allow": ["worker"]}}, strict=False)
    sb = ShellSandbox(caps, workdir, "ses_spawn_only", [], host_env=HOST_ENV)
    assert sb.start() == []
    try:
        assert sb.cgroup is not None and all(os.path.isdir(d) for d in sb.cgroup.dirs.values())
        with pytest.raises(MurError) as info:
            sb.run("bash", command="true")
        assert info.value.code == "E-RUN-015"
    finally:
        sb.close()
    assert all(not os.path.exists(d) for d in sb.cgroup.dirs.values())


def test_a_namespace_the_probe_promised_but_launch_cannot_make_is_refused(sandbox, monkeypatch):
    """Never a silent fallback to port rules: E-CAP-005 when network.allow needs the namespace."""
    from mur.sandbox import namespaces

    def fail(names, **_kw):
        raise namespaces.HolderFailed("namespaces", f"cannot create the session namespaces ({'+'.join(names)}): "
                                      "simulated")

    monkeypatch.setattr(namespaces, "create", fail)
    with pytest.raises(MurError) as info:
        sandbox(network_allow=["https://api.example.com"], resolve=lambda h: ["127.0.0.1"])
    assert info.value.code == "E-CAP-005" and "simulated" in info.value.message
    notes: list[str] = []
    sb = sandbox(log=notes.append)  # no network grant: the namespaces are defence in depth, logged
    assert sb.policy.namespaces == () and sb.policy.network.mode == "none"
    assert any("simulated; deciding again without it" in n for n in notes)
    assert sb.run("bash", command="echo ok").stdout == "ok\n"
