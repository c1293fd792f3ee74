"""Helpers for the export tests: capsules written on the fly, strict validation of what is exported."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parent / "data"
K8S_VERSION = "1.37.0"


def capsule(tmp_path: Path, body: str, name: str = "cap") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "murmur.yaml").write_text(f"name: {name}\nversion: \"1.2.3\"\n{body}")
    return d / "murmur.yaml"


def validate_k8s(obj: dict[str, Any]) -> None:
    """kubernetes-validate --strict against a recent Kubernetes: unknown fields are errors."""
    import kubernetes_validate

    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@functools.lru_cache(maxsize=None)
def sandbox_schema() -> dict[str, Any]:
    crd = yaml.load((DATA / "agents.x-k8s.io_sandboxes.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta1")
    return version["schema"]["openAPIV3Schema"]


def unknown_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the schema does not declare (a CRD schema has no additionalProperties: false; the API
    server would prune them silently, so a typo would vanish instead of failing)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            if props is not None and key in props:
                out += unknown_fields(value, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += unknown_fields(value, extra, f"{path}.{key}")
            elif props is not None or extra is False:
                out.append(f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            out += unknown_fields(item, schema["items"], f"{path}[{i}]")
    return out


class FakeEngine:
    """The seam mur.export.image reads the image through (`inspect`): what a Docker engine would answer."""

    def __init__(self, images: dict[str, dict[str, Any]]):
        self.images = images

    def inspect(self, ref: str) -> dict[str, Any] | None:
        return self.images.get(ref)


DIGEST = "sha256:" + "ab" * 32


def image_of(inputs: Any, ref: str, digest: str | None = DIGEST, **labels: str) -> FakeEngine:
    """An engine holding `ref` as the capsule's image (labels overridable), pushed with `digest` unless None."""
    from mur import __version__

    repo = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    have = {"dev.mur.capsule.name": inputs.name, "dev.mur.capsule.version": inputs.version,
            "dev.mur.capsule.digest": inputs.digest, "dev.mur.mur_version": inputs.mur_version or __version__}
    have.update({f"dev.mur.{k.replace('_', '.', 1) if k.startswith('capsule_') else k}": v for k, v in labels.items()})
    attrs = {"Id": "sha256:" + "cd" * 32, "Config": {"Labels": have},
             "RepoDigests": [f"{repo}@{digest}"] if digest else []}
    images = {ref: attrs}
    if digest:
        images[f"{repo}@{digest}"] = attrs
    return FakeEngine(images)
