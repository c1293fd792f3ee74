"""Manifests: the artifact manifest (mur build/publish) and the capsule manifest (mur run), plus config files."""

from mur.manifest.load import LoadedCapsule, load_capsule, parse_capsule

__all__ = ["LoadedCapsule", "load_capsule", "parse_capsule"]
