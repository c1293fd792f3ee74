"""The export tests run the built image under Docker with the exported pod's settings; they share the
image fixtures (engine, base image, clean HOME, the example's image) with integration/image."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "image"))

from image_fixtures import base_image, docker_client, hello, hello_image, mur_env  # noqa: E402,F401
