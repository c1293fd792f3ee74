"""No cluster runs here, so the exported pod's security settings are exercised by running the image under
Docker with exactly those settings, read from the exported manifests: the user, the read-only root
filesystem, no capabilities, no privilege escalation, the shipped seccomp profile, the memory and CPU
limits, the two writable volumes and the secret's env. The capsule answers A2A, the probes' URL answers,
mur's kernel sandbox (Landlock + seccomp) still applies inside, and a capsule with shell tools runs
them there: the pod's own cgroup (read-only to everything in it) is their aggregate bound."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from image_support import RUN, agent_card, free_port, mur, mur_json, wait_for

pytestmark = [pytest.mark.requires_docker, pytest.mark.slow]

UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def quantity_bytes(q: str) -> int:
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", q)
    assert m, q
    return int(m.group(1)) * UNITS.get(m.group(2) or "", 1)


def nano_cpus(q: str) -> int:
    return int(q[:-1]) * 1_000_000 if q.endswith("m") else int(q) * 1_000_000_000


def as_docker(export_dir: Path, port: int) -> dict[str, Any]:
    """docker-py run() arguments equal to the exported pod (host network instead of a pod network)."""
    docs = {p.name: yaml.safe_load(p.read_text()) for p in export_dir.glob("*.yaml")}
    pod = docs["deployment.yaml"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc, psc = c["securityContext"], pod["securityContext"]
    assert psc["seccompProfile"]["type"] == "Localhost"
    profile = (export_dir / "seccomp" / psc["seccompProfile"]["localhostProfile"]).read_text()
    opts = ["seccomp=" + json.dumps(json.loads(profile))]
    if sc["allowPrivilegeEscalation"] is False:
        opts.append("no-new-privileges")
    assert sc["privileged"] is False and sc["runAsNonRoot"] is True
    env = {e["name"]: e["value"] for e in c["env"]}
    env.update(docs["secret.yaml"]["stringData"])
    env.update(MUR_BIND="127.0.0.1", MUR_PORT=str(port))  # the pod's own network becomes the host's loopback
    volumes = {v["name"]: v for v in pod["volumes"]}
    tmpfs = {}
    for m in c["volumeMounts"]:  # emptyDir: writable, executable, owned by fsGroup
        size = quantity_bytes(volumes[m["name"]]["emptyDir"]["sizeLimit"])
        tmpfs[m["mountPath"]] = f"rw,exec,size={size},uid={sc['runAsUser']},gid={psc['fsGroup']},mode=0770"
    limits = c["resources"]["limits"]
    return {
        "user": f"{sc['runAsUser']}:{sc['runAsGroup']}", "read_only": sc["readOnlyRootFilesystem"],
        "cap_drop": sc["capabilities"]["drop"], "security_opt": opts, "tmpfs": tmpfs, "environment": env,
        "mem_limit": quantity_bytes(limits["memory"]), "nano_cpus": nano_cpus(limits["cpu"]),
        "network_mode": "host", "detach": True, "probe_path": c["readinessProbe"]["httpGet"]["path"],
    }


def run_pod(docker_client, image: str, export_dir: Path, name: str):
    port = free_port()
    kwargs = as_docker(export_dir, port)
    probe = kwargs.pop("probe_path")
    return docker_client.containers.run(image, name=f"{RUN}-{name}", **kwargs), port, probe


def test_the_exported_pod_serves_a2a_and_keeps_mur_sandbox(docker_client, hello_image, mur_env, hello, tmp_path):
    out = tmp_path / "k8s"
    mur_json("export", "k8s", "-m", str(hello / "murmur.yaml"), "--image", hello_image["tag"], "-o", str(out),
             "--env", "HELLO_GREETING=Bonjour", env=mur_env)
    c, port, probe = run_pod(docker_client, hello_image["tag"], out, "pod")
    try:
        wait_for(lambda: agent_card(port), 120, "the agent card")
        assert httpx.get(f"http://127.0.0.1:{port}{probe}", timeout=5).status_code == 200  # the probes' URL
        # the Secret's env reached the capsule
        assert mur("send", f"127.0.0.1:{port}", "Ada", env=mur_env).stdout.strip() == "Bonjour, Ada!"
        # the process: non-root, no capabilities, no_new_privs, under the shipped seccomp profile
        status = c.exec_run(["cat", "/proc/1/status"]).output.decode()
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert fields["Uid"].split()[0] == "10001" and fields["CapEff"].strip() == "0000000000000000"
        assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2"
        # mur's own sandbox still works in there: a real Landlock ruleset and seccomp filter applied in a child
        code, probe_out = c.exec_run(["mur", "probe", "--json"])
        report = json.loads(probe_out.decode().strip().splitlines()[-1])
        assert code == 0 and report["landlock_abi"] >= 1 and report["seccomp"] is True
        assert report["achieved"] == "scoped" and report["uid"] == 10001
        # the root filesystem is read-only; the workdir volume is where sessions go
        code, _ = c.exec_run(["sh", "-c", "echo x > /capsule/x"])
        assert code != 0
        code, ls = c.exec_run(["sh", "-c", "ls -d /workdir/sessions/ses_*/trace.jsonl /workdir/work/MURMUR.md"])
        assert code == 0 and len(ls.decode().split()) == 2  # the session's record beside the tools' workdir
        c.reload()
        assert c.attrs["HostConfig"]["ReadonlyRootfs"] is True and c.attrs["HostConfig"]["CapDrop"] == ["ALL"]
    finally:
        c.remove(force=True)


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


def test_a_shell_capsule_runs_its_tools_under_the_pods_settings(docker_client, base_image, mur_env, tmp_path):
    """The capsule exported as is (no refusal): the pod's memory limit is cgroup_memory_bytes, and inside it
    mur takes the pod's read-only cgroup as the tools' aggregate bound; the tools run, confined."""
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
        out = tmp_path / "k8s"
        exported = mur_json("export", "k8s", "-m", str(capsule / "murmur.yaml"), "--image", built["tag"], "-o", str(out),
                            env=mur_env)
        assert any(n.startswith("shell tools: the pod's memory limit (512Mi") for n in exported["notes"]), exported
        c, a2a, _probe = run_pod(docker_client, built["tag"], out, "shell")
        try:
            wait_for(lambda: agent_card(a2a), 180, "the agent card")
            answer = mur("send", f"127.0.0.1:{a2a}", "run the scripted tools", env=mur_env, timeout=600)
            assert "pod script finished" in answer.stdout, answer.stdout + answer.stderr
            results = tool_results(model)
            trace = c.exec_run(["sh", "-c", "cat /workdir/sessions/ses_*/trace.jsonl"]).output.decode()
            boot = c.exec_run(["sh", "-c", "cat /workdir/sessions/ses_*/logs/bootstrap.log"]).output.decode()
            control = c.exec_run(["cat", "/capsule/murmur.yaml"], user="10001")  # the same uid, bare
        finally:
            c.remove(force=True)
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
