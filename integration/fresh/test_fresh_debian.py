"""The README's first command on a really fresh machine: a Debian 12 container holding only python3,
git and CA certificates (no python3-venv) runs `scripts/demo` and a fast slice of `scripts/test`.

The image is built from the local base image (mur-base:bookworm, images/build-base.sh) plus those
three packages; this machine's own CA certificates are added because its HTTPS egress to PyPI goes
through a proxy that a stock trust store does not know (that is the machine's, not mur's, concern).
The container uses the host network so pip and apt reach their mirrors, and works on a fresh `git
clone` of this checkout's HEAD, so only committed files count. About 6-7 minutes: pip downloads
everything, and componentize-py builds the two components the demo runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.requires_docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BASE = os.environ.get("MUR_BASE_IMAGE", "mur-base:bookworm")
FAST_SUBSET = "test_cli_edge or test_manifest_schema or test_cli_config"

DOCKERFILE = f"""FROM {BASE}
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update -q && apt-get install -y -q --no-install-recommends python3 git ca-certificates \\
 && update-ca-certificates && rm -rf /var/lib/apt/lists/*
"""


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def fresh_image(tmp_path_factory):
    if _run(["docker", "image", "inspect", BASE]).returncode != 0:
        pytest.skip(f"needs the local base image {BASE} (images/build-base.sh)")
    context = tmp_path_factory.mktemp("fresh-image")
    (context / "ca").mkdir()
    for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy(cert, context / "ca" / cert.name)
    (context / "Dockerfile").write_text(DOCKERFILE)
    tag = f"mur-fresh-test:{uuid.uuid4().hex[:12]}"
    build = _run(["docker", "build", "--network", "host", "-q", "-t", tag, str(context)], timeout=600)
    assert build.returncode == 0, build.stderr
    yield tag
    _run(["docker", "rmi", "-f", tag])


def test_scripts_demo_then_tests_on_a_fresh_debian(fresh_image, tmp_path):
    checkout = tmp_path / "mur"
    clone = _run(["git", "clone", "-q", str(ROOT), str(checkout)])
    assert clone.returncode == 0, clone.stderr
    name = f"mur-fresh-{uuid.uuid4().hex[:12]}"
    script = ("set -e; python3 -c 'import ensurepip' 2>/dev/null && { echo 'venv already there' >&2; exit 3; }; "
              "scripts/demo Ada; "
              f"scripts/test tests -x -p no:cacheprovider -k '{FAST_SUBSET}'")  # scripts/test adds -q
    try:
        run = _run(["docker", "run", "--name", name, "--network", "host", "-v", f"{checkout}:/src", "-w", "/src",
                    fresh_image, "bash", "-c", script], timeout=1800)
    finally:
        _run(["docker", "rm", "-f", name])
        # Files the container (root) made in the bind mount: the clone is removed with tmp_path.
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    assert "Hello, Ada!" in run.stdout
    # both were missing (the venv module, and the shared libpython the runtime bundle carries): bootstrap fixed it
    assert "bootstrap: installing python3.11-venv libpython3.11" in run.stderr
    assert re.search(r"^\d+ passed", run.stdout.splitlines()[-1]), run.stdout[-500:]
    for needle in ("SetuptoolsDeprecationWarning", "is deprecated", "Traceback"):
        assert needle not in log, needle
