"""Fixtures for the image and export tests: the Docker engine, the base image, a clean HOME, the
example's image (imported by integration/image/conftest.py and integration/export/conftest.py).

The example's image is built once per session through the CLI, exactly as a user would (the runtime
bundle comes from MUR_BUNDLE_CACHE, shared with the deploy tests; precompiled components from a
cache kept between runs). Every image a test makes is removed at the end of the session.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from image_support import BASE_IMAGE, ROOT, RUN, cache_dir, copy_capsule, mur_json

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine here
        pytest.skip(f"no Docker engine: {exc}")
    yield client
    for img in client.images.list():
        if any(t.startswith(RUN) or f"/{RUN}" in t for t in img.tags):
            try:
                client.images.remove(img.id, force=True)
            except Exception:  # noqa: BLE001 - best effort at session end
                pass


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    """mur-base:bookworm (images/build-base.sh is a no-op when the engine has it)."""
    proc = subprocess.run(["bash", str(ROOT / "images" / "build-base.sh")], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"images/build-base.sh failed:\n{proc.stderr[-3000:]}")
    return BASE_IMAGE


@pytest.fixture(scope="session")
def mur_env(tmp_path_factory) -> dict[str, str]:
    """The environment of every `mur` the tests run: a clean HOME, the shared runtime and compile caches."""
    home = tmp_path_factory.mktemp("home")
    # precompiled components (keyed by wasm digest and engine) are kept between runs, like the bundle
    env = {**os.environ, "HOME": str(home), "MUR_BUNDLE_CACHE": str(cache_dir("bundles")),
           "MUR_CACHE_DIR": str(cache_dir("image-test-cache"))}
    env.pop("SOURCE_DATE_EPOCH", None)
    return env


@pytest.fixture(scope="session")
def hello(tmp_path_factory) -> "os.PathLike[str]":
    src = ROOT / "examples" / "hello"
    if not (src / "capsule.wasm").is_file() or not (src / "greet" / "greet.wasm").is_file():
        proc = subprocess.run([str(ROOT / "scripts" / "build-examples")], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"scripts/build-examples failed:\n{proc.stderr[-3000:]}")
    return copy_capsule(src, tmp_path_factory.mktemp("capsules") / "hello")


@pytest.fixture(scope="session")
def hello_image(base_image, mur_env, hello) -> dict:
    """`mur image build` of the example (the session's tag: <RUN>/hello:0.1.0)."""
    return mur_json("image", "build", "-m", str(hello / "murmur.yaml"), "-t", f"{RUN}/hello:0.1.0", env=mur_env)
