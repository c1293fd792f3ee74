"""Kubernetes objects for a capsule (pure: capsule facts + image -> dicts).

One pod shape for every form (Deployment, StatefulSet, agent-sandbox `Sandbox`): the image's user
(10001), no privilege escalation, every capability dropped, a read-only root filesystem with
writable /workdir and /tmp volumes, the Localhost seccomp profile that lets Landlock through
(mur.export.seccomp) or the node's RuntimeDefault, probes that run the image's healthcheck (an
authenticated A2A call), resources from the manifest's limits (for a capsule with shell tools the
memory limit is exactly cgroup_memory_bytes: the pod's cgroup is their bound).

The A2A token: the door listens on the pod's address, so it needs a bearer token (E-A2A-005). It is
a Secret of its own, mounted into an init container that copies it into a memory-backed volume as
a file of the capsule user's, mode 0600: a Secret volume's files are root's, and with fsGroup the
kubelet makes them group-readable (mode | 0440), which the runtime refuses for a token (E-A2A-003).
The capsule's container mounts that volume read-only and is pointed at the file.
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
SECRET_KEY = "token"
SECRET_MOUNT = "/run/secrets/mur-a2a"  # the Secret's files (root's, group 10001, 0440): read by the init container
TOKEN_DIR = "/run/mur"  # a memory-backed volume: the token as the capsule user's own file, 0600
TOKEN_FILE = f"{TOKEN_DIR}/a2a-token"
COPY_TOKEN = (f"umask 077 && cat {SECRET_MOUNT}/{SECRET_KEY} > {TOKEN_DIR}/.a2a-token.new "
              f"&& mv -f {TOKEN_DIR}/.a2a-token.new {TOKEN_FILE}")
SECCOMP_CHOICES = ("localhost", "runtime-default")


@dataclass(frozen=True)
class CapsuleFacts:
    """What the objects are made of, taken from the shipped capsule (mur.resolve.shipped.ship)."""

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
    """The image's healthcheck: an authenticated JSON-RPC call (the token's file is in the env), so a
    pod whose door would refuse its callers is not ready."""
    return {"exec": {"command": [S.HEALTHCHECK]}, "periodSeconds": period, "timeoutSeconds": 5,
            "failureThreshold": failures}


def _security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": S.UID, "runAsGroup": S.GID, "privileged": False,
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def _seccomp(choice: str) -> dict[str, Any]:
    if choice == "runtime-default":
        return {"type": "RuntimeDefault"}
    return {"type": "Localhost", "localhostProfile": PROFILE_NAME}


def pod_spec(f: CapsuleFacts, image: str, secret: str, token_secret: str, workdir_volume: bool,
             seccomp: str = "localhost") -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {"sizeLimit": quantity(TMP_SIZE)}},
        {"name": "a2a-token-secret", "secret": {"secretName": token_secret, "defaultMode": 0o440,
                                                 "items": [{"key": SECRET_KEY, "path": SECRET_KEY}]}},
        {"name": "a2a-token", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
    if workdir_volume:
        volumes.insert(0, {"name": "workdir", "emptyDir": {"sizeLimit": quantity(f.workdir_bytes)}})
    init = {
        "name": "a2a-token",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", COPY_TOKEN],
        "resources": {"limits": {"memory": "64Mi", "cpu": "100m"}, "requests": {"memory": "16Mi", "cpu": "10m"}},
        "securityContext": _security(),
        "volumeMounts": [{"name": "a2a-token-secret", "mountPath": SECRET_MOUNT, "readOnly": True},
                         {"name": "a2a-token", "mountPath": TOKEN_DIR}],
    }
    container = {
        "name": "capsule",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "a2a", "containerPort": f.port, "protocol": "TCP"}],
        "env": [{"name": "MUR_BIND", "value": "0.0.0.0"}, {"name": "MUR_PORT", "value": str(f.port)},
                {"name": "MUR_WORKDIR", "value": S.TOOLS_WORKDIR}, {"name": "MURMUR_A2A_TOKEN_FILE", "value": TOKEN_FILE}],
        "envFrom": [{"secretRef": {"name": secret}}],
        "resources": {
            "limits": {"memory": quantity(f.memory_bytes), "cpu": cpu(f.cpu_percent)},
            "requests": {"memory": quantity(min(f.memory_bytes, 256 * MiB)), "cpu": "100m"},
        },
        "securityContext": _security(),
        "volumeMounts": [{"name": "workdir", "mountPath": S.WORKDIR}, {"name": "tmp", "mountPath": "/tmp"},
                         {"name": "a2a-token", "mountPath": TOKEN_DIR, "readOnly": True}],
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
            "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": _seccomp(seccomp),
        },
        "initContainers": [init],
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


def objects(f: CapsuleFacts, image: str, token: str, sandbox: bool = False, namespace: str | None = None,
            seccomp: str = "localhost") -> Export:
    """Secrets, NetworkPolicy, the workload, and (except for a Sandbox, whose controller makes one) a Service."""
    name = dns_label(f.name)
    selector = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name}
    labels = {**selector, "app.kubernetes.io/version": label_value(f.version) or "unversioned",
              "app.kubernetes.io/component": "capsule", "app.kubernetes.io/managed-by": "mur"}
    annotations = {f"{ANNOTATION}capsule": f"{f.name} {f.version}", f"{ANNOTATION}capsule-digest": f.capsule_digest,
                   f"{ANNOTATION}image": image}
    secret, token_secret = f"{name}-env", f"{name}-a2a-token"
    notes: list[str] = []
    out: dict[str, dict[str, Any]] = {}
    out["secret.yaml"] = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret, "labels": labels,
                     "annotations": {f"{ANNOTATION}env-allow": ",".join(f.env_allow)}},
        "type": "Opaque",
        "stringData": dict(sorted(f.env.items())),
    }
    out["a2a-token.yaml"] = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": token_secret, "labels": labels,
                     "annotations": {f"{ANNOTATION}purpose": "the A2A bearer token callers must present"}},
        "type": "Opaque",
        "stringData": {SECRET_KEY: token},
    }
    missing = [k for k in f.env_allow if k not in f.env]
    if missing:
        notes.append(f"secret.yaml has no value for {', '.join(missing)} (capabilities.env.allow): add them to "
                     "stringData, or pass --env / --env-file")
    policy, net_notes = network_policy(name, labels, selector, f.port, list(f.allow))
    out["networkpolicy.yaml"] = policy
    notes += net_notes
    template = {"metadata": {"labels": labels, "annotations": annotations},
                "spec": pod_spec(f, image, secret, token_secret, workdir_volume=not f.persistent, seccomp=seccomp)}
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
    if seccomp == "runtime-default":
        notes.append("seccomp: the node's RuntimeDefault profile; mur's Landlock rules hold where it allows Landlock's "
                     "three syscalls (the default profiles of containerd, CRI-O and Docker have since 2022); "
                     "`kubectl exec POD -- mur probe` says what is enforced")
    if namespace:
        for obj in out.values():
            obj["metadata"] = {"name": obj["metadata"]["name"], "namespace": namespace,
                               **{k: v for k, v in obj["metadata"].items() if k != "name"}}
    return Export(out, kind, tuple(notes))
