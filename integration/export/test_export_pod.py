"""No cluster runs here, so the exported pod's security settings are exercised by running the image under
Docker with exactly those settings, read from the exported manifests: the user, the read-only root
filesystem, no capabilities, no privilege escalation, the shipped seccomp profile, the memory and CPU
limits, the two writable volumes and the secret's env. The capsule answers A2A, the probes' URL answers,
mur's kernel sandbox (Landlock + seccomp) still applies inside, and a shell-capable capsule fails
closed (E-RUN-012), which is why `mur export k8s` refuses it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from image_support import RUN, agent_card, copy_capsule, free_port, mur, mur_json, wait_for

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
        code, ls = c.exec_run(["sh", "-c", "ls -d /workdir/.murmur/ses_*"])
        assert code == 0 and ls.decode().strip()
        c.reload()
        assert c.attrs["HostConfig"]["ReadonlyRootfs"] is True and c.attrs["HostConfig"]["CapDrop"] == ["ALL"]
    finally:
        c.remove(force=True)


def test_a_shell_capsule_fails_closed_in_the_pod(docker_client, hello_image, mur_env, hello, tmp_path):
    """A pod has no cgroup a non-root process may create: mur refuses shell tools (E-RUN-012), as the export says."""
    shell = copy_capsule(hello, tmp_path / "shell")
    text = (shell / "murmur.yaml").read_text()
    (shell / "murmur.yaml").write_text(text.replace("capabilities:\n", "capabilities:\n  shell:\n    allow: [sh]\n", 1))
    refused = mur("export", "k8s", "-m", str(shell / "murmur.yaml"), "--image", "x:1", "-o", str(tmp_path / "k"),
                  env=mur_env, check=False)
    assert refused.returncode == 1 and "error[E-EXP-001]" in refused.stderr and "E-RUN-012" in refused.stderr
    built = mur_json("image", "build", "-m", str(shell / "murmur.yaml"), "-t", f"{RUN}/shell:1", env=mur_env)
    out = tmp_path / "k8s"  # the hello export's pod settings, with the shell capsule's image in it
    mur_json("export", "k8s", "-m", str(hello / "murmur.yaml"), "--image", built["tag"], "-o", str(out), env=mur_env)
    c, _port, _ = run_pod(docker_client, built["tag"], out, "shell")
    try:
        status = c.wait(timeout=120)["StatusCode"]
        logs = c.logs().decode()
        assert status == 1 and "error[E-RUN-012]" in logs, logs[-2000:]
    finally:
        c.remove(force=True)
