"""`mur export k8s`: manifests that pass kubernetes-validate --strict, and a pod that keeps mur's sandbox."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from export_support import DIGEST, capsule, image_of, sandbox_schema, unknown_fields, validate_k8s
from mur.resolve.shipped import ship
from mur.errors import MurError
from mur.export import export_k8s
from mur.export.k8s import cpu, dns_label, quantity

IMAGE = "127.0.0.1:5000/cap:1.2.3"
PINNED = f"127.0.0.1:5000/cap@{DIGEST}"
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


def exported(tmp_path, body=LIMITS, sandbox=False, env=(), **options):
    inputs = ship(capsule(tmp_path, body), env_args=list(env))
    out = tmp_path / "k8s"
    result = export_k8s(inputs, IMAGE, out, sandbox=sandbox, engine=image_of(inputs, IMAGE), **options)
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
    assert sorted(docs) == ["a2a-token.yaml", "deployment.yaml", "networkpolicy.yaml", "secret.yaml", "service.yaml"]
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
    assert mounts == {"/workdir": "workdir", "/tmp": "tmp", "/run/mur": "a2a-token"}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["workdir"]["emptyDir"]["sizeLimit"] == "2Gi"  # capabilities.resources.workdir_max_bytes
    assert spec["automountServiceAccountToken"] is False


def test_probes_run_the_authenticated_healthcheck_and_resources_from_the_limits(tmp_path):
    _, docs, _ = exported(tmp_path)
    c = pod(docs)["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["exec"] == {"command": ["/usr/local/bin/mur-healthcheck"]}  # it presents the token
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
    inputs = ship(capsule(tmp_path, ""))
    out = tmp_path / "k8s"
    export_k8s(inputs, IMAGE, out, engine=image_of(inputs, IMAGE))
    (out / "notes.txt").write_text("mine")
    export_k8s(inputs, IMAGE, out, sandbox=True, engine=image_of(inputs, IMAGE))
    assert sorted(p.name for p in out.iterdir()) == ["a2a-token", "a2a-token.yaml", "networkpolicy.yaml", "notes.txt",
                                                     "sandbox.yaml", "seccomp", "secret.yaml"]
    export_k8s(inputs, IMAGE, out, sandbox=True, seccomp="runtime-default", engine=image_of(inputs, IMAGE))
    assert not (out / "seccomp" / "mur-landlock.json").exists()


def test_a_shell_capsule_gets_a_pod_whose_memory_limit_is_its_tools_bound(tmp_path):
    inputs = ship(capsule(tmp_path, "capabilities:\n  shell:\n    allow: [bash]\n  resources:\n"
                                      "    cgroup_memory_bytes: 536870912\n    cgroup_pids_max: 96\n"))
    result = export_k8s(inputs, IMAGE, tmp_path / "k8s", engine=image_of(inputs, IMAGE))
    pod = yaml.safe_load((tmp_path / "k8s" / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["memory"] == "512Mi"  # not + 1 GiB: the runtime shares the bound
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (note,) = [n for n in result.notes if n.startswith("shell tools")]
    assert "aggregate bound" in note and "RLIMIT_NPROC (at most cgroup_pids_max = 96)" in note


def test_bad_image_and_output_are_refused(tmp_path):
    inputs = ship(capsule(tmp_path, ""))
    with pytest.raises(MurError) as err:
        export_k8s(inputs, "Not An Image", tmp_path / "k8s")
    assert err.value.code == "E-EXP-001" and err.value.message.startswith("--image: invalid image reference")
    (tmp_path / "file").write_text("x")
    with pytest.raises(MurError) as err:
        export_k8s(inputs, IMAGE, tmp_path / "file", engine=image_of(inputs, IMAGE))
    assert err.value.code == "E-EXP-001"


def test_quantities():
    assert (quantity(5 << 30), quantity(256 << 20), quantity(1536), quantity(1000)) == ("5Gi", "256Mi", "1536", "1000")
    assert (cpu(200), cpu(150), cpu(5)) == ("2", "1500m", "50m")
    assert dns_label("My_Capsule.v2") == "my-capsule-v2" and dns_label("---") == "capsule"


def test_cli_writes_the_example_and_reports_json(tmp_path, cli, monkeypatch):
    from mur.engine.docker import DockerEngine

    inputs = ship(Path(HELLO))
    engine = image_of(inputs, IMAGE)
    monkeypatch.setattr(DockerEngine, "for_images", lambda: engine)  # the engine export would ask
    out = tmp_path / "k8s"
    code, stdout, stderr = cli("export", "k8s", "-m", HELLO, "--image", IMAGE, "-o", str(out), "-n", "agents", "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["kind"] == "Deployment" and "seccomp/mur-landlock.json" in report["files"]
    assert report["image"] == f"127.0.0.1:5000/cap@{DIGEST}" and report["namespace"] == "agents"
    assert report["token_file"] == str(out / "a2a-token")
    code, stdout, stderr = cli("export", "k8s", "-m", HELLO, "--image", IMAGE, "-o", str(out))
    assert code == 0 and f"mur send 127.0.0.1:8080 'hello' --token-file {out / 'a2a-token'}" in stdout
    assert "kubectl port-forward svc/hello 8080:8080" in stdout


def test_cli_refuses_a_bad_image_and_an_absent_engine_with_a_code(tmp_path, monkeypatch):
    out = tmp_path / "k8s"
    proc = subprocess.run([sys.executable, "-m", "mur", "export", "k8s", "-m", HELLO, "--image", "BAD IMAGE", "-o",
                           str(out)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error[E-EXP-001]: --image: invalid image reference")
    assert "Traceback" not in proc.stderr
    # no engine to read the labels from: refused, never exported unchecked
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    proc = subprocess.run([sys.executable, "-m", "mur", "export", "k8s", "-m", HELLO, "--image", IMAGE, "-o", str(out)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and proc.stderr.startswith(f"error[E-EXP-001]: cannot check the image {IMAGE}")
    assert not out.exists()


def test_the_image_is_named_by_digest_and_must_be_this_capsules(tmp_path):
    inputs = ship(capsule(tmp_path, ""))
    out = tmp_path / "k8s"
    result = export_k8s(inputs, IMAGE, out, engine=image_of(inputs, IMAGE))
    spec = yaml.safe_load((out / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    assert result.image == PINNED
    assert spec["containers"][0]["image"] == PINNED and spec["initContainers"][0]["image"] == PINNED
    # the digest form is accepted when the engine's copy carries that digest
    assert export_k8s(inputs, PINNED, out, engine=image_of(inputs, IMAGE)).image == PINNED

    def refused(engine, ref=IMAGE) -> str:
        with pytest.raises(MurError) as err:
            export_k8s(inputs, ref, tmp_path / "refused", engine=engine)
        assert err.value.code == "E-EXP-001" and not (tmp_path / "refused").exists()
        return err.value.message + " | " + (err.value.hint or "")

    assert "was not built from" in refused(image_of(inputs, IMAGE, capsule_name="other"))
    assert "capsule.digest is sha256:" in refused(image_of(inputs, IMAGE, capsule_digest="sha256:" + "0" * 64))
    assert "not a mur capsule image" in refused(image_of(inputs, IMAGE, capsule_digest=""))
    assert "not in the Docker engine" in refused(image_of(inputs, "127.0.0.1:5000/other:1"))
    assert "mur image push 127.0.0.1:5000/cap:1.2.3" in refused(image_of(inputs, IMAGE, digest=None))
    assert "not in the Docker engine" in refused(image_of(inputs, IMAGE), ref=f"127.0.0.1:5000/cap@sha256:{'ef' * 32}")
    assert "not sha256:<64 hex digits>" in refused(image_of(inputs, IMAGE), ref="127.0.0.1:5000/cap@sha256:abc")


def test_the_a2a_token_is_a_secret_copied_into_a_private_file_of_the_capsule_user(tmp_path):
    result, docs, out = exported(tmp_path)
    token = (out / "a2a-token").read_text().strip()
    assert len(token) >= 43 and stat.S_IMODE(os.stat(out / "a2a-token").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out / "a2a-token.yaml").st_mode) == 0o600
    secret = docs["a2a-token.yaml"]
    assert secret["kind"] == "Secret" and secret["stringData"] == {"token": token}
    spec = pod(docs)
    assert token not in (out / "deployment.yaml").read_text()
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["a2a-token-secret"]["secret"] == {"secretName": "cap-a2a-token", "defaultMode": 0o440,
                                                  "items": [{"key": "token", "path": "token"}]}
    assert vols["a2a-token"]["emptyDir"]["medium"] == "Memory"  # never on the node's disk
    (init,) = spec["initContainers"]
    assert init["securityContext"] == spec["containers"][0]["securityContext"]
    assert init["command"][:2] == ["/bin/sh", "-c"] and "umask 077" in init["command"][2]
    c = spec["containers"][0]
    assert {"name": "MURMUR_A2A_TOKEN_FILE", "value": "/run/mur/a2a-token"} in c["env"]
    assert {"name": "MUR_BIND", "value": "0.0.0.0"} in c["env"]  # off loopback: the token is what allows it
    assert {"name": "a2a-token", "mountPath": "/run/mur", "readOnly": True} in c["volumeMounts"]
    assert any(str(out / "a2a-token") in n for n in result.notes)
    # exporting again keeps the token callers already have
    again, docs, _ = exported_again(tmp_path, out)
    assert docs["a2a-token.yaml"]["stringData"]["token"] == token


def exported_again(tmp_path, out, **options):
    inputs = ship(tmp_path / "cap" / "murmur.yaml")
    result = export_k8s(inputs, IMAGE, out, engine=image_of(inputs, IMAGE), **options)
    docs = {n: yaml.safe_load((out / n).read_text()) for n in result.files if n.endswith(".yaml")}
    return result, docs, out


def test_a_given_token_file_is_used_and_not_copied(tmp_path):
    mine = tmp_path / "my-token"
    mine.write_text("t0ken-of-mine\n")
    mine.chmod(0o600)
    result, docs, out = exported(tmp_path, token_file=mine)
    assert docs["a2a-token.yaml"]["stringData"] == {"token": "t0ken-of-mine"}
    assert result.token_file == mine and not (out / "a2a-token").exists()
    mine.chmod(0o644)
    with pytest.raises(MurError) as err:
        exported_again(tmp_path, out, token_file=mine)
    assert err.value.code == "E-A2A-003" and "chmod 600" in err.value.hint


def test_namespace_on_every_object_and_seccomp_runtime_default(tmp_path):
    result, docs, out = exported(tmp_path, namespace="agents", seccomp="runtime-default")
    assert {d["metadata"]["namespace"] for d in docs.values()} == {"agents"}
    for doc in docs.values():
        validate_k8s(doc)
    assert pod(docs)["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "seccomp/mur-landlock.json" not in result.files and not (out / "seccomp").exists()
    assert any("RuntimeDefault" in n for n in result.notes)
    for bad, option in (("Agents", "namespace"), ("a" * 64, "namespace"), ("unconfined", "seccomp")):
        with pytest.raises(MurError) as err:
            exported_again(tmp_path, out, **{option: bad})
        assert err.value.code == "E-EXP-001" and f"--{option}" in err.value.message
