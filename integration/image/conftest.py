"""Fixtures: see image_fixtures.py (shared with integration/export)."""

from image_fixtures import base_image, docker_client, hello, hello_image, mur_env  # noqa: F401
