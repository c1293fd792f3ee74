"""No cluster runs here, so the exported pod runs under Docker as exported (integration/export/pod_docker.py
turns each of its settings into the Docker setting that does the same): the image by digest from a real
registry, the user, the read-only root filesystem, no capabilities, no privilege escalation, the shipped
seccomp profile (or the engine's default for RuntimeDefault), the limits, the volumes with the kubelet's
fsGroup ownership, the Secrets as env and as a mounted token file, the init container, a network namespace
of its own. Nothing is overridden: the door listens on 0.0.0.0 there and the token is what lets it. The
operator's mur, in the pod's network namespace (what `kubectl port-forward` gives), gets an authenticated
answer; the exec probes present the token; mur's kernel sandbox (Landlock + seccomp) still applies inside;
and a capsule with shell tools runs them there: the pod's own cgroup (read-only to everything in it) is
their aggregate bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from image_support import RUN, Registry, agent_card, free_port, mur, mur_json, wait_for
from pod_docker import Pod

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_root, pytest.mark.slow]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    reg = Registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.close()


def pushed(docker_client, registry, image: dict, mur_env) -> str:
    """The image pushed to the loopback registry; returns its tag there (export finds the digest)."""
    repo = f"{registry.address}/{RUN}/{image['capsule']['name']}"
    docker_client.api.tag(image["id"], repo, image["capsule"]["version"])
    ref = f"{repo}:{image['capsule']['version']}"
    mur_json("image", "push", ref, env=mur_env)
    return ref


@pytest.fixture(scope="module")
def hello_ref(docker_client, registry, hello_image, mur_env) -> str:
    return pushed(docker_client, registry, hello_image, mur_env)


def started(pod: Pod) -> None:
    pod.start()

    def up() -> bool:
        pod.container.reload()
        if pod.container.status == "exited":
            pytest.fail(f"the pod's container exited:\n{pod.container.logs().decode()[-3000:]}")
        return pod.probe("startupProbe") == 0

    wait_for(up, 180, "the startup probe")


def send(pod: Pod, port: int, text: str, *args: str, env: dict[str, str]):
    return pod.in_pod_netns([*mur_argv(), "send", f"127.0.0.1:{port}", text, *args], env=env, timeout=300)


def mur_argv() -> list[str]:
    import sys

    return [sys.executable, "-m", "mur"]


def test_the_exported_pod_runs_as_exported_and_answers_with_the_token(docker_client, hello_ref, mur_env, hello,
                                                                     tmp_path):
    out = tmp_path / "k8s"
    exported = mur_json("export", "k8s", "-m", str(hello / "murmur.yaml"), "--image", hello_ref, "-o", str(out),
                        "--namespace", "agents", "--env", "HELLO_GREETING=Bonjour", env=mur_env)
    assert exported["image"].startswith(hello_ref.rsplit(":", 1)[0] + "@sha256:")  # by digest
    pod = Pod(docker_client, out, tmp_path, f"{RUN}-pod")
    try:
        started(pod)
        assert pod.probe("readinessProbe") == 0 and pod.probe("livenessProbe") == 0
        env = pod.container.attrs["Config"]["Env"]
        assert "MUR_BIND=0.0.0.0" in env and "MURMUR_A2A_TOKEN_FILE=/run/mur/a2a-token" in env  # as exported
        port = exported["port"]
        answer = send(pod, port, "Ada", "--token-file", exported["token_file"], env=mur_env)
        assert (answer.returncode, answer.stdout.strip()) == (0, "Bonjour, Ada!"), answer.stderr  # the Secret's env
        refused = send(pod, port, "Ada", env=mur_env)
        assert refused.returncode == 1 and "error[E-A2A-002]" in refused.stderr and "bearer token" in refused.stderr
        # the token file the runtime reads: the capsule user's, 0600, on a read-only mount; not in any env
        code, st = pod.container.exec_run(["stat", "-c", "%u %a", "/run/mur/a2a-token"])
        assert (code, st.decode().split()) == (0, ["10001", "600"])
        code, _ = pod.container.exec_run(["sh", "-c", "echo x > /run/mur/a2a-token"])
        assert code != 0
        token = Path(exported["token_file"]).read_text().strip()
        assert token.encode() not in pod.container.exec_run(["cat", "/proc/1/environ"]).output
        # the process: non-root, no capabilities, no_new_privs, under the shipped seccomp profile
        status = pod.container.exec_run(["cat", "/proc/1/status"]).output.decode()
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert fields["Uid"].split()[0] == "10001" and fields["CapEff"].strip() == "0000000000000000"
        assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2"
        # mur's own sandbox still works in there: a real Landlock ruleset and seccomp filter applied in a child
        code, probe_out = pod.container.exec_run(["mur", "probe", "--json"])
        report = json.loads(probe_out.decode().strip().splitlines()[-1])
        assert code == 0 and report["landlock_abi"] >= 1 and report["seccomp"] is True
        assert report["achieved"] == "scoped" and report["uid"] == 10001
        # the root filesystem is read-only; the workdir volume is where sessions go
        code, _ = pod.container.exec_run(["sh", "-c", "echo x > /capsule/x"])
        assert code != 0
        code, ls = pod.container.exec_run(["sh", "-c", "ls -d /workdir/sessions/ses_*/trace.jsonl /workdir/work/MURMUR.md"])
        assert code == 0 and len(ls.decode().split()) == 2  # the session's record beside the tools' workdir
        pod.container.reload()
        host = pod.container.attrs["HostConfig"]
        assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"] and host["NetworkMode"] == "none"
    finally:
        pod.close()


def test_runtime_default_seccomp_still_gets_landlock(docker_client, hello_ref, mur_env, hello, tmp_path):
    """Where the profile cannot be delivered to the nodes: RuntimeDefault, and mur's Landlock still holds."""
    out = tmp_path / "k8s"
    mur_json("export", "k8s", "-m", str(hello / "murmur.yaml"), "--image", hello_ref, "-o", str(out),
             "--seccomp", "runtime-default", env=mur_env)
    assert not (out / "seccomp").exists()
    pod = Pod(docker_client, out, tmp_path, f"{RUN}-pod-rd")
    try:
        started(pod)
        code, probe_out = pod.container.exec_run(["mur", "probe", "--json"])
        report = json.loads(probe_out.decode().strip().splitlines()[-1])
        assert code == 0 and report["landlock_abi"] >= 1 and report["achieved"] == "scoped"
        answer = send(pod, 8080, "Ada", "--token-file", str(out / "a2a-token"), env=mur_env)
        assert answer.stdout.strip() == "Hello, Ada!", answer.stderr
    finally:
        pod.close()


def test_export_refuses_another_capsules_image(docker_client, hello_ref, mur_env, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "murmur.yaml").write_text("name: other\nversion: \"0.1.0\"\n")
    run = mur("export", "k8s", "-m", str(other / "murmur.yaml"), "--image", hello_ref, "-o", str(tmp_path / "k8s"),
              env=mur_env, check=False)
    assert run.returncode == 1 and run.stderr.startswith(f"error[E-EXP-001]: image {hello_ref} was not built from")
    assert "capsule.name is hello, the manifest's other" in run.stderr and not (tmp_path / "k8s").exists()


SHELL_CAPSULE = """name: podshell
version: "0.1.0"
artifacts:
  - name: murmur-driver-anthropic
    runtime: driver
    source: ./driver
    local_source: true
capabilities:
  network:
    allow: ["http://127.0.0.1:{port}"]
  shell:
    allow: [bash, cat, id, head, tr, setsid, sleep]
  resources:
    cgroup_memory_bytes: {memory}
    cgroup_pids_max: 64
inference:
  transport: http
  endpoint: http://127.0.0.1:{port}
  model: claude-haiku-4-5
  api_key: sk-ant-pod
  max_turns: 10
  driver:
    artifact: murmur-driver-anthropic
"""
CALLS = [
    "id -u; echo made > f && cat f",  # a legitimate tool, in the tools' workdir
    "cat /capsule/murmur.yaml; echo rc=$?",  # readable by uid 10001 bare (the control below): not to a tool
    "bomb() { bomb | bomb & }; bomb; SECONDS=0; while (( SECONDS < 2 )); do :; done",  # fork bomb
    "x=$(head -c 900000000 /dev/zero | tr '\\0' x); echo ${#x}",  # a memory bomb past the pod's limit
    "echo still here",  # the runtime, in the same cgroup, outlived the OOM kill
]


def test_a_shell_capsule_runs_its_tools_under_the_pods_settings(docker_client, registry, base_image, mur_env,
                                                                tmp_path):
    """The capsule exported as is (no refusal): the pod's memory limit is cgroup_memory_bytes, and inside it
    mur takes the pod's read-only cgroup as the tools' aggregate bound; the tools run, confined. The model
    server is on this machine's loopback, so this pod shares the host's network (and binds loopback)."""
    from mur.testing.modelserver import ModelServer

    driver = Path(__file__).resolve().parents[2] / "examples" / "murmur-driver-anthropic"
    script = [{"tool_use": {"name": "bash", "input": {"command": c}, "id": f"toolu_pod_{i}"}} for i, c in enumerate(CALLS)]
    with ModelServer(script + [{"text": "pod script finished"}]) as model:
        port = int(model.url.rsplit(":", 1)[1])
        capsule = tmp_path / "podshell"
        (capsule / "driver").mkdir(parents=True)
        for name in ("murmur.yaml", "murmur-driver-anthropic.wasm"):
            (capsule / "driver" / name).write_bytes((driver / name).read_bytes())
        memory = 512 << 20
        (capsule / "murmur.yaml").write_text(SHELL_CAPSULE.format(port=port, memory=memory))
        built = mur_json("image", "build", "-m", str(capsule / "murmur.yaml"), "-t", f"{RUN}/podshell:1", env=mur_env)
        ref = pushed(docker_client, registry, built, mur_env)
        out = tmp_path / "k8s"
        exported = mur_json("export", "k8s", "-m", str(capsule / "murmur.yaml"), "--image", ref, "-o", str(out),
                            env=mur_env)
        assert any(n.startswith("shell tools: the pod's memory limit (512Mi") for n in exported["notes"]), exported
        a2a = free_port()
        pod = Pod(docker_client, out, tmp_path, f"{RUN}-shell", network="host",
                  env_override={"MUR_BIND": "127.0.0.1", "MUR_PORT": str(a2a)})
        try:
            pod.start()
            c = pod.container
            wait_for(lambda: agent_card(a2a), 180, "the agent card")
            answer = mur("send", f"127.0.0.1:{a2a}", "run the scripted tools", "--token-file", exported["token_file"],
                         env=mur_env, timeout=600)
            assert "pod script finished" in answer.stdout, answer.stdout + answer.stderr
            results = tool_results(model)
            trace = c.exec_run(["sh", "-c", "cat /workdir/sessions/ses_*/trace.jsonl"]).output.decode()
            boot = c.exec_run(["sh", "-c", "cat /workdir/sessions/ses_*/logs/bootstrap.log"]).output.decode()
            control = c.exec_run(["cat", "/capsule/murmur.yaml"], user="10001")  # the same uid, bare
        finally:
            pod.close()
    assert "the aggregate bound is the cgroup mur runs in" in boot, boot[-3000:]
    assert results[0].startswith("10001\nmade"), results[0]
    assert "Permission denied" in results[1] and "podshell" not in results[1]
    assert control.exit_code == 0 and b"name: podshell" in control.output
    assert "Resource temporarily unavailable" in results[2], results[2]
    shells = [json.loads(line) for line in trace.splitlines() if '"event_type": "shell"' in line
              or '"event_type":"shell"' in line]
    assert shells[3]["exit_code"] == 137 and shells[3].get("resource_limit") == "cgroup_memory_bytes", shells[3]
    assert results[4].startswith("still here"), results[4]


def tool_results(model) -> list[str]:
    """The tool_result text of each scripted call, in order (from the recorded requests)."""
    found: dict[str, str] = {}
    for req in model.message_requests():
        for message in (req.body or {}).get("messages") or []:
            for block in message.get("content") if isinstance(message.get("content"), list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    text = content if isinstance(content, str) else "".join(
                        b.get("text", "") for b in content or [] if isinstance(b, dict))
                    try:
                        body = json.loads(text)
                        text = body.get("data", text) if isinstance(body, dict) else text
                    except ValueError:
                        pass
                    found[block["tool_use_id"]] = text
    return [found.get(f"toolu_pod_{i}", "") for i in range(len(CALLS))]
