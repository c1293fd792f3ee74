"""What the user asked `mur deploy` for (built by mur/cli/deploy.py, read by the providers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mur.deploy.targets import TargetSpec


@dataclass(frozen=True)
class DeployRequest:
    manifest: Path
    target: TargetSpec
    workdir: Path | None = None
    env_args: tuple[str, ...] = ()
    env_file: Path | None = None
    release_source: str | None = None
    mur_binary: Path | None = None
    use_bundle: bool = False
    publish: bool = False
    init: str = "auto"
    containment: str | None = None
    trust_new_host: bool = False
    deployment_id: str | None = None
    start_timeout: float = 180.0
    base_image: str = "mur-base:bookworm"
    seccomp_profile: str | None = None
    keep_lifecycle: bool = False
    precompile: bool = True
    keep_sessions: int = 5
    no_boot_hook: bool = False
    tls: str | None = None  # "self-signed"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # Docker only: deploy this prebuilt capsule image (its labels must match the manifest), or the image
    # of an archive written by `mur image save` (loaded into the engine first).
    image: str | None = None
    image_archive: Path | None = None
    # SSH and local hosts: put a front (mur.deploy.fronted) before the service at its first deploy, so
    # releases change without refusing a request; a deployment keeps what its first deploy chose
    front: bool = False

    def __post_init__(self) -> None:
        from mur.errors import MurError

        if (self.image or self.image_archive) and self.target.provider != "docker":
            raise MurError("E-DEPLOY-001", "--image and --image-archive deploy to Docker only", "add --docker")
        if self.image and self.image_archive:
            raise MurError("E-DEPLOY-001", "give --image TAG or --image-archive FILE, not both", "drop one of them")
