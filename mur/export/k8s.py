"""Kubernetes objects for a capsule (pure: capsule facts + image -> dicts).

One pod shape for every form (Deployment, StatefulSet, agent-sandbox `Sandbox`): the image's user
(10001), no privilege escalation, every capability dropped, a read-only root filesystem with
writable /workdir and /tmp volumes, the Localhost seccomp profile that lets Landlock through
(mur.export.seccomp), probes on the agent card, resources from the manifest's limits (for a capsule
with shell tools the memory limit is exactly cgroup_memory_bytes: the pod's cgroup is their bound).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mur.export.netpol import network_policy
from mur.export.seccomp import PROFILE_NAME
from mur.image import spec as S

ANNOTATION = "mur.dev/"
SANDBOX_API = "agents.x-k8s.io/v1beta1"
TMP_SIZE = 1 << 30
GiB, MiB = 1 << 30, 1 << 20


@dataclass(frozen=True)
class CapsuleFacts:
    """What the objects are made of, taken from the gathered capsule (mur.deploy.capsule.gather)."""

    name: str
    version: str
    capsule_digest: str
    port: int
    memory_bytes: int
    cpu_percent: int
    workdir_bytes: int
    persistent: bool  # lifecycle.conversation: threaded keeps history in the workdir
    env: dict[str, str] = field(default_factory=dict)
    env_allow: tuple[str, ...] = ()
    allow: tuple[Any, ...] = ()  # parsed capabilities.network.allow (mur.manifest.network.AllowEntry)
    subprocesses: bool = False  # shell / spawn grants: the pod's cgroup is the tools' aggregate bound
    pids_max: int = 0  # capabilities.resources.cgroup_pids_max


def dns_label(text: str) -> str:
    """A DNS-1123 label (object names): lowercase alphanumerics and '-', at most 63 characters."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return label or "capsule"


def label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("-._")
    return value


def quantity(n: int) -> str:
    """Bytes as a Kubernetes quantity (Gi / Mi when exact)."""
    for unit, size in (("Gi", GiB), ("Mi", MiB), ("Ki", 1024)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def cpu(percent: int) -> str:
    return str(percent // 100) if percent % 100 == 0 else f"{percent * 10}m"


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": S.AGENT_CARD, "port": "a2a"}, "periodSeconds": period, "timeoutSeconds": 5,
            "failureThreshold": failures}


def pod_spec(f: CapsuleFacts, image: str, secret: str, workdir_volume: bool) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": quantity(TMP_SIZE)}}]
    if workdir_volume:
        volumes.insert(0, {"name": "workdir", "emptyDir": {"sizeLimit": quantity(f.workdir_bytes)}})
    container = {
        "name": "capsule",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "a2a", "containerPort": f.port, "protocol": "TCP"}],
        "env": [{"name": "MUR_BIND", "value": "0.0.0.0"}, {"name": "MUR_PORT", "value": str(f.port)},
                {"name": "MUR_WORKDIR", "value": S.TOOLS_WORKDIR}],
        "envFrom": [{"secretRef": {"name": secret}}],
        "resources": {
            "limits": {"memory": quantity(f.memory_bytes), "cpu": cpu(f.cpu_percent)},
            "requests": {"memory": quantity(min(f.memory_bytes, 256 * MiB)), "cpu": "100m"},
        },
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": S.UID, "runAsGroup": S.GID, "privileged": False,
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "workdir", "mountPath": S.WORKDIR}, {"name": "tmp", "mountPath": "/tmp"}],
        "startupProbe": _probe(2, 90),
        "readinessProbe": _probe(10, 3),
        "livenessProbe": _probe(20, 3),
    }
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": S.UID, "runAsGroup": S.GID, "fsGroup": S.GID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "Localhost", "localhostProfile": PROFILE_NAME},
        },
        "containers": [container],
        "volumes": volumes,
    }


def _workdir_claim(f: CapsuleFacts) -> dict[str, Any]:
    return {"metadata": {"name": "workdir"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": quantity(f.workdir_bytes)}}}}


@dataclass(frozen=True)
class Export:
    objects: dict[str, dict[str, Any]]  # file name -> object
    kind: str  # Deployment | StatefulSet | Sandbox
    notes: tuple[str, ...]


def objects(f: CapsuleFacts, image: str, sandbox: bool = False) -> Export:
    """Secret, NetworkPolicy, the workload, and (except for a Sandbox, whose controller makes one) a Service."""
    name = dns_label(f.name)
    selector = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name}
    labels = {**selector, "app.kubernetes.io/version": label_value(f.version) or "unversioned",
              "app.kubernetes.io/component": "capsule", "app.kubernetes.io/managed-by": "mur"}
    annotations = {f"{ANNOTATION}capsule": f"{f.name} {f.version}", f"{ANNOTATION}capsule-digest": f.capsule_digest,
                   f"{ANNOTATION}image": image}
    secret = f"{name}-env"
    notes: list[str] = []
    out: dict[str, dict[str, Any]] = {}
    out["secret.yaml"] = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret, "labels": labels,
                     "annotations": {f"{ANNOTATION}env-allow": ",".join(f.env_allow)}},
        "type": "Opaque",
        "stringData": dict(sorted(f.env.items())),
    }
    missing = [k for k in f.env_allow if k not in f.env]
    if missing:
        notes.append(f"secret.yaml has no value for {', '.join(missing)} (capabilities.env.allow): add them to "
                     "stringData, or pass --env / --env-file")
    policy, net_notes = network_policy(name, labels, selector, f.port, list(f.allow))
    out["networkpolicy.yaml"] = policy
    notes += net_notes
    template = {"metadata": {"labels": labels, "annotations": annotations},
                "spec": pod_spec(f, image, secret, workdir_volume=not f.persistent)}
    if sandbox:
        spec: dict[str, Any] = {"podTemplate": template, "service": True}
        if f.persistent:
            spec["volumeClaimTemplates"] = [_workdir_claim(f)]
        out["sandbox.yaml"] = {"apiVersion": SANDBOX_API, "kind": "Sandbox",
                               "metadata": {"name": name, "labels": labels, "annotations": annotations}, "spec": spec}
        kind = "Sandbox"
    else:
        out["service.yaml"] = {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
            "spec": {"type": "ClusterIP", "selector": selector,
                     "ports": [{"name": "a2a", "port": f.port, "targetPort": "a2a", "protocol": "TCP",
                                "appProtocol": "http"}]},
        }
        workload: dict[str, Any] = {"replicas": 1, "selector": {"matchLabels": selector}, "template": template}
        if f.persistent:
            kind = "StatefulSet"
            workload.update(serviceName=name, volumeClaimTemplates=[_workdir_claim(f)])
        else:
            kind = "Deployment"
        out[f"{kind.lower()}.yaml"] = {"apiVersion": "apps/v1", "kind": kind,
                                       "metadata": {"name": name, "labels": labels, "annotations": annotations},
                                       "spec": workload}
    if f.persistent:
        notes.append("lifecycle.conversation is threaded: the workdir (conversation history) is a persistent "
                     f"volume claim of {quantity(f.workdir_bytes)}")
    if f.subprocesses:
        notes.append(f"shell tools: the pod's memory limit ({quantity(f.memory_bytes)} = cgroup_memory_bytes, shared "
                     "by the runtime and its tools) is their aggregate bound; a pod carries no pids limit, so their "
                     f"tasks are bounded by RLIMIT_NPROC (at most cgroup_pids_max = {f.pids_max}); the kubelet's "
                     "podPidsLimit bounds the whole pod as well")
    return Export(out, kind, tuple(notes))
