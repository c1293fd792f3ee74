"""`mur export k8s`: manifests that pass kubernetes-validate --strict, and a pod that keeps mur's sandbox."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import jsonschema
import pytest
import yaml

from export_support import capsule, sandbox_schema, unknown_fields, validate_k8s
from mur.deploy.capsule import gather
from mur.errors import MurError
from mur.export import export_k8s
from mur.export.k8s import cpu, dns_label, quantity

IMAGE = "127.0.0.1:5000/cap:1.2.3"
HELLO = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hello", "murmur.yaml")

LIMITS = """capabilities:
  network:
    allow:
      - https://api.example.com
      - http://10.1.2.3:8000
      - 10.1.2.3:9000
      - http://127.0.0.1:8765
  env:
    allow: [API_TOKEN, OTHER]
  resources:
    cgroup_memory_bytes: 1073741824
    cgroup_cpu_percent: 150
    workdir_max_bytes: 2147483648
network:
  internal_port: 9090
"""


def exported(tmp_path, body=LIMITS, sandbox=False, env=()):
    inputs = gather(capsule(tmp_path, body), env_args=list(env))
    out = tmp_path / "k8s"
    result = export_k8s(inputs, IMAGE, out, sandbox=sandbox)
    docs = {}
    for name in result.files:
        if name.endswith(".yaml"):
            docs[name] = yaml.safe_load((out / name).read_text())
    return result, docs, out


def pod(docs):
    workload = docs.get("deployment.yaml") or docs.get("statefulset.yaml")
    return workload["spec"]["template"]["spec"]


def test_every_manifest_passes_strict_validation(tmp_path):
    result, docs, _ = exported(tmp_path, env=["API_TOKEN=t0k"])
    assert result.kind == "Deployment"
    assert sorted(docs) == ["deployment.yaml", "networkpolicy.yaml", "secret.yaml", "service.yaml"]
    for doc in docs.values():
        validate_k8s(doc)


def test_strict_validation_would_catch_a_stray_field(tmp_path):
    import kubernetes_validate

    _, docs, _ = exported(tmp_path)
    docs["deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRoot"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(docs["deployment.yaml"])


def test_pod_keeps_mur_sandbox_working(tmp_path):
    _, docs, out = exported(tmp_path)
    spec = pod(docs)
    c = spec["containers"][0]
    sc = c["securityContext"]
    assert sc == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "privileged": False,
                  "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert spec["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": "mur-landlock.json"}
    profile = json.loads((out / "seccomp" / "mur-landlock.json").read_text())
    allowed = [s for s in profile["syscalls"] if s["action"] == "SCMP_ACT_ALLOW"][0]["names"]
    assert {"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"} <= set(allowed)
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/workdir": "workdir", "/tmp": "tmp"}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["workdir"]["emptyDir"]["sizeLimit"] == "2Gi"  # capabilities.resources.workdir_max_bytes
    assert spec["automountServiceAccountToken"] is False


def test_probes_on_the_agent_card_and_resources_from_the_limits(tmp_path):
    _, docs, _ = exported(tmp_path)
    c = pod(docs)["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/.well-known/agent-card.json", "port": "a2a"}
    assert c["ports"] == [{"name": "a2a", "containerPort": 9090, "protocol": "TCP"}]  # network.internal_port
    # the runtime plus the tools' cgroup_memory_bytes (what mur deploy gives its service), and cgroup_cpu_percent
    assert c["resources"]["limits"] == {"memory": "2Gi", "cpu": "1500m"}
    assert {"name": "MUR_PORT", "value": "9090"} in c["env"]
    svc = docs["service.yaml"]["spec"]
    assert svc["ports"][0]["targetPort"] == "a2a" and svc["selector"] == docs["deployment.yaml"]["spec"]["selector"]["matchLabels"]


def test_network_policy_from_network_allow(tmp_path):
    result, docs, _ = exported(tmp_path)
    spec = docs["networkpolicy.yaml"]["spec"]
    assert spec["podSelector"]["matchLabels"] == docs["deployment.yaml"]["spec"]["selector"]["matchLabels"]
    assert spec["ingress"] == [{"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 9090}]}]
    egress = spec["egress"]
    dns, ip, named = egress
    assert {p["port"] for p in dns["ports"]} == {53} and dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert ip == {"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}],
                  "ports": [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 9000}]}
    assert named["ports"] == [{"protocol": "TCP", "port": 443}]
    assert named["to"][0]["ipBlock"] == {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}
    assert any("cannot name a host" in n for n in result.notes)
    assert any("127.0.0.1:8765" in n and "loopback" in n for n in result.notes)


def test_no_network_grant_means_no_egress_at_all(tmp_path):
    _, docs, _ = exported(tmp_path, body="")
    assert docs["networkpolicy.yaml"]["spec"]["egress"] == []
    assert docs["networkpolicy.yaml"]["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_a_bare_host_opens_every_port_and_still_gets_dns(tmp_path):
    _, docs, _ = exported(tmp_path, body="capabilities:\n  network:\n    allow: [api.example.com, https://b.example.com]\n")
    egress = docs["networkpolicy.yaml"]["spec"]["egress"]
    assert len(egress) == 2 and "ports" not in egress[1]  # any port covers b.example.com's 443 too


def test_secret_holds_env_values_0600_and_names_what_is_missing(tmp_path):
    result, docs, out = exported(tmp_path, env=["API_TOKEN=s3cret"])
    assert docs["secret.yaml"]["stringData"] == {"API_TOKEN": "s3cret"}
    assert docs["secret.yaml"]["metadata"]["annotations"]["mur.dev/env-allow"] == "API_TOKEN,OTHER"
    assert stat.S_IMODE(os.stat(out / "secret.yaml").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out / "deployment.yaml").st_mode) == 0o644
    assert any("no value for OTHER" in n for n in result.notes)
    c = pod(docs)["containers"][0]
    assert c["envFrom"] == [{"secretRef": {"name": "cap-env"}}]
    assert "s3cret" not in (out / "deployment.yaml").read_text()


def test_threaded_conversation_gets_a_statefulset_with_a_volume_claim(tmp_path):
    _, docs, out = exported(tmp_path, body="lifecycle:\n  conversation: threaded\n")
    assert "statefulset.yaml" in docs and "deployment.yaml" not in docs
    sts = docs["statefulset.yaml"]
    validate_k8s(sts)
    assert sts["spec"]["serviceName"] == "cap"
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "workdir" and claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "workdir" not in {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}  # the claim mounts it


def test_sandbox_validates_against_the_agent_sandbox_crd(tmp_path):
    result, docs, _ = exported(tmp_path, sandbox=True, body="lifecycle:\n  conversation: threaded\n")
    assert result.kind == "Sandbox" and "service.yaml" not in docs and "deployment.yaml" not in docs
    sb = docs["sandbox.yaml"]
    assert sb["apiVersion"] == "agents.x-k8s.io/v1beta1" and sb["kind"] == "Sandbox"
    schema = sandbox_schema()
    jsonschema.validate(sb, schema)
    assert unknown_fields(sb, schema) == []
    assert sb["spec"]["service"] is True and sb["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "workdir"
    # the pod inside it is the same pod, so it passes kubernetes-validate as a Pod
    template = sb["spec"]["podTemplate"]
    validate_k8s({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **template["metadata"]},
                  "spec": template["spec"]})
    for doc in docs.values():
        if doc["kind"] != "Sandbox":
            validate_k8s(doc)


def test_crd_check_would_catch_a_stray_field(tmp_path):
    _, docs, _ = exported(tmp_path, sandbox=True)
    sb = docs["sandbox.yaml"]
    sb["spec"]["replicas"] = 2  # v1alpha1 had it; v1beta1 does not
    sb["spec"]["podTemplate"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "eighty"
    assert unknown_fields(sb, sandbox_schema()) == [".spec.replicas"]
    with pytest.raises(jsonschema.ValidationError, match="'eighty' is not of type 'integer'"):
        jsonschema.validate(sb, sandbox_schema())


def test_a_second_export_removes_files_the_first_wrote(tmp_path):
    inputs = gather(capsule(tmp_path, ""))
    out = tmp_path / "k8s"
    export_k8s(inputs, IMAGE, out)
    (out / "notes.txt").write_text("mine")
    export_k8s(inputs, IMAGE, out, sandbox=True)
    assert sorted(p.name for p in out.iterdir()) == ["networkpolicy.yaml", "notes.txt", "sandbox.yaml", "seccomp",
                                                     "secret.yaml"]


def test_a_shell_capsule_gets_a_pod_whose_memory_limit_is_its_tools_bound(tmp_path):
    inputs = gather(capsule(tmp_path, "capabilities:\n  shell:\n    allow: [bash]\n  resources:\n"
                                      "    cgroup_memory_bytes: 536870912\n    cgroup_pids_max: 96\n"))
    result = export_k8s(inputs, IMAGE, tmp_path / "k8s")
    pod = yaml.safe_load((tmp_path / "k8s" / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["memory"] == "512Mi"  # not + 1 GiB: the runtime shares the bound
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (note,) = [n for n in result.notes if n.startswith("shell tools")]
    assert "aggregate bound" in note and "RLIMIT_NPROC (at most cgroup_pids_max = 96)" in note


def test_bad_image_and_output_are_refused(tmp_path):
    inputs = gather(capsule(tmp_path, ""))
    with pytest.raises(MurError) as err:
        export_k8s(inputs, "Not An Image", tmp_path / "k8s")
    assert err.value.code == "E-EXP-001" and err.value.message.startswith("--image: invalid image reference")
    (tmp_path / "file").write_text("x")
    with pytest.raises(MurError) as err:
        export_k8s(inputs, IMAGE, tmp_path / "file")
    assert err.value.code == "E-EXP-001"


def test_quantities():
    assert (quantity(5 << 30), quantity(256 << 20), quantity(1536), quantity(1000)) == ("5Gi", "256Mi", "1536", "1000")
    assert (cpu(200), cpu(150), cpu(5)) == ("2", "1500m", "50m")
    assert dns_label("My_Capsule.v2") == "my-capsule-v2" and dns_label("---") == "capsule"


def test_cli_writes_the_example_and_reports_json(tmp_path):
    out = tmp_path / "k8s"
    proc = subprocess.run([sys.executable, "-m", "mur", "export", "k8s", "-m", HELLO, "--image", IMAGE, "-o", str(out),
                           "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["kind"] == "Deployment" and "seccomp/mur-landlock.json" in report["files"]
    proc = subprocess.run([sys.executable, "-m", "mur", "export", "k8s", "-m", HELLO, "--image", "BAD IMAGE", "-o",
                           str(out)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error[E-EXP-001]: --image: invalid image reference")
    assert "Traceback" not in proc.stderr
