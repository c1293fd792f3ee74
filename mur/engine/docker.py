"""The Docker engine as one object: image operations (E-IMG-* on failure) and container operations
(E-DEPLOY-010) over one connection and one SDK door (mur.engine.sdk)."""

from __future__ import annotations

from mur.engine.containers import ContainerOps, container_error
from mur.engine.images import ImageOps, image_error

# How long one engine reply may take (seconds). Saving or loading a large image streams for minutes;
# a deploy's container operations answer at once, so a stuck engine is reported within two.
IMAGE_TIMEOUT = 600.0
DEPLOY_TIMEOUT = 120.0


class DockerEngine(ImageOps, ContainerOps):
    """A Docker engine (DOCKER_HOST, else the local socket). `DockerEngine(client)` wraps a client."""

    @classmethod
    def for_images(cls) -> DockerEngine:
        """The engine for `mur image` and `mur export`: no engine is E-IMG-001."""
        return cls.connect(IMAGE_TIMEOUT, image_error)

    @classmethod
    def for_deploy(cls) -> DockerEngine:
        """The engine for a Docker deploy: no engine is E-DEPLOY-010."""
        return cls.connect(DEPLOY_TIMEOUT, container_error)
