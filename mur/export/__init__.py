"""Manifests for orchestrators that run capsules mur built: Kubernetes (docs/kubernetes.md)."""

from mur.export.kubernetes import ExportResult, export_k8s

__all__ = ["ExportResult", "export_k8s"]
