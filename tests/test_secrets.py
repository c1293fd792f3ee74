"""The credential backstop's names: one regex for the globs, the same answers as the globs."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

from mur.secrets import CREDENTIAL_GLOBS, CREDENTIAL_NAMES, is_credential_name


@pytest.mark.parametrize("name, credential", [
    ("AWS_REGION", True), ("aws_profile", True), ("DOCKER_HOST", True), ("OPENAI_API_KEY", True),
    ("my_token", True), ("DB_PASSWORD", True), ("X_SECRET_KEY", True), ("SSH_PRIVATE_KEY", True),
    ("GITHUB_TOKEN", True), ("KUBECONFIG", True),
    ("HELLO_GREETING", False), ("TOKEN", False), ("X_TOKENS", False), ("XAWS_", False), ("PATH", False),
    ("A_TOKEN\n", False), ("A\nB_TOKEN", True), ("", False),
])
def test_credential_names(name, credential):
    upper = name.upper()
    by_globs = upper in CREDENTIAL_NAMES or any(fnmatchcase(upper, g) for g in CREDENTIAL_GLOBS)
    assert is_credential_name(name) is credential is by_globs


def test_the_wasmtime_version_is_the_installed_distribution():
    from importlib import metadata

    from mur.wasm.cachekey import wasmtime_version

    assert wasmtime_version() == metadata.version("wasmtime")
