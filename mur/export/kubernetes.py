"""`mur export k8s`: a gathered capsule -> manifests in a directory, plus the seccomp profile beside them.

    DIR/secret.yaml  networkpolicy.yaml  (deployment|statefulset).yaml + service.yaml | sandbox.yaml
    DIR/seccomp/mur-landlock.json      (copy to /var/lib/kubelet/seccomp/ on every node)

`kubectl apply -f DIR` applies them (it does not descend into seccomp/). Each file is written
atomically; files of an earlier export that this one does not produce are removed; secret.yaml
(env values) is 0600.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mur.errors import MurError
from mur.export.k8s import CapsuleFacts, objects
from mur.export.seccomp import PROFILE_NAME, profile_bytes
from mur.fsutil import atomic_write_bytes
from mur.image import spec as S
from mur.image.reference import parse_ref

OWN_FILES = ("secret.yaml", "networkpolicy.yaml", "service.yaml", "deployment.yaml", "statefulset.yaml",
             "sandbox.yaml", f"seccomp/{PROFILE_NAME}")


@dataclass(frozen=True)
class ExportResult:
    directory: Path
    kind: str
    files: tuple[str, ...]
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "kind": self.kind, "files": list(self.files),
                "seccomp_profile": f"seccomp/{PROFILE_NAME}", "notes": list(self.notes)}


def facts(inputs: Any) -> CapsuleFacts:
    """What the manifests need from a gathered capsule."""
    from mur.manifest.network import parse_allow_list

    cap = inputs.capsule
    caps = cap.capabilities
    # A pod's cgroup is read-only for mur: no cgroup of the session's own, so the pod's own memory limit is
    # the shell tools' aggregate bound (mur.sandbox.enclosing), which must then be at or below theirs.
    memory = int(caps.resources.cgroup_memory_bytes) if inputs.needs_subprocess else inputs.service_memory_bytes
    return CapsuleFacts(
        name=inputs.name, version=inputs.version, capsule_digest=inputs.digest,
        port=inputs.internal_port or S.DEFAULT_PORT, memory_bytes=memory, subprocesses=inputs.needs_subprocess,
        pids_max=int(caps.resources.cgroup_pids_max),
        cpu_percent=int(caps.resources.cgroup_cpu_percent), workdir_bytes=int(caps.resources.workdir_max_bytes),
        persistent=cap.lifecycle.conversation == "threaded", env=dict(inputs.env),
        env_allow=tuple(caps.env.allow), allow=tuple(parse_allow_list(list(caps.network.allow))))


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # shared label dicts are written out, never as &anchors
        return True


def render(obj: dict[str, Any], header: str) -> bytes:
    body = yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return f"# {header}\n{body}".encode()


def export_k8s(inputs: Any, image: str, out_dir: Path, sandbox: bool = False) -> ExportResult:
    """Write the manifests for `inputs` running `image` into `out_dir`."""
    try:
        parse_ref(image)
    except MurError as exc:
        raise MurError("E-EXP-001", f"--image: {exc.message}", exc.hint) from exc
    f = facts(inputs)
    exp = objects(f, image, sandbox=sandbox)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise MurError("E-EXP-001", f"{out_dir} exists and is not a directory", "choose another -o DIR")
    header = f"mur export k8s: capsule {inputs.name} {inputs.version}, image {image}"
    files = {name: render(obj, header) for name, obj in exp.objects.items()}
    files[f"seccomp/{PROFILE_NAME}"] = profile_bytes()
    try:
        for name, data in files.items():
            atomic_write_bytes(out_dir / name, data, 0o600 if name == "secret.yaml" else 0o644)
        for stale in OWN_FILES:
            if stale not in files:
                (out_dir / stale).unlink(missing_ok=True)
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot write the manifests into {out_dir}: {exc.strerror or exc}") from exc
    return ExportResult(out_dir, exp.kind, tuple(sorted(files)), exp.notes)
