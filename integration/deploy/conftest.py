"""Fixtures for the deploy integration tests: real Docker engine, sshd "VMs", a qemu VM, capsules.

Expensive things are built once and cached across runs where the machine keeps them: the base
image and the sshd image (in the engine), the runtime bundle (MUR_BUNDLE_CACHE, keyed by the
sources), the VM disk (integration/vm/build-vm.sh, keyed by the script). Every test deploys from a
clean HOME, as a user would on a fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from deploy_support import BASE_IMAGE, ROOT, SshdVM, sshd_container, sshd_image

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
CACHE = Path(os.environ.get("MUR_CI_CACHE", "/var/cache/mur-ci"))
# Compiled components are content-addressed: every clean HOME shares the invoking user's cache, as
# the runtime bundle is shared (precompiling examples/hello costs minutes on a loaded 2-core machine).
os.environ.setdefault("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))


def _docker_client():
    try:
        import docker

        client = docker.from_env(timeout=300)
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine here
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture(scope="session")
def docker_client():
    return _docker_client()


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    try:
        docker_client.images.get(BASE_IMAGE)
    except Exception:  # noqa: BLE001
        proc = subprocess.run(["bash", str(ROOT / "images" / "build-base.sh")], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"images/build-base.sh failed:\n{proc.stderr[-3000:]}")
    return BASE_IMAGE


@pytest.fixture(scope="session")
def bundle_cache() -> Path:
    """Where built runtime bundles are kept between runs (shared by every clean HOME)."""
    path = CACHE / "bundles" if os.access(CACHE if CACHE.exists() else CACHE.parent, os.W_OK) else \
        Path(tempfile.gettempdir()) / "mur-bundles"
    path.mkdir(parents=True, exist_ok=True)
    os.environ["MUR_BUNDLE_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def runtime_bundle(bundle_cache, tmp_path_factory) -> Path:
    """The PyInstaller one-file runtime of this checkout (built once per source change)."""
    home = tmp_path_factory.mktemp("bundle-home")
    code = ("from mur.runtime.bundle import ensure_local_bundle; b = ensure_local_bundle(); "
            "print(b.path)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "HOME": str(home), "MUR_BUNDLE_CACHE": str(bundle_cache)})
    if proc.returncode != 0:
        pytest.fail(f"building the runtime bundle failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def home(tmp_path, bundle_cache) -> Path:
    """A clean HOME for the deploying side. Afterwards nothing the test started on this machine stays:
    a test that failed before its destroy leaves local supervisors, fronts and services otherwise
    (every one of them names a path under the test's tmp_path)."""
    h = tmp_path / "home"
    h.mkdir()
    yield h
    stop_processes_under(tmp_path)


def stop_processes_under(path: Path) -> list[int]:
    """SIGKILL every process of this machine whose command line names a path under `path`."""
    import signal

    mark, me, killed = str(path) + "/", os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.decode("utf-8", "replace").startswith(mark) for a in argv):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except OSError:
                pass
    return killed


@pytest.fixture(scope="session")
def sshd_vm_image(docker_client, base_image) -> str:
    return sshd_image(docker_client)


@pytest.fixture
def sshd_vm(sshd_vm_image, tmp_path) -> SshdVM:
    """An sshd "VM" without systemd, with cron (so a boot hook exists)."""
    vm = sshd_container(sshd_vm_image, tmp_path / "sshd")
    yield vm
    vm.close()


@pytest.fixture
def bare_vm(sshd_vm_image, tmp_path) -> SshdVM:
    """An sshd "VM" with neither systemd nor a running cron: no boot hook exists."""
    vm = sshd_container(sshd_vm_image, tmp_path / "bare", cron=False)
    yield vm
    vm.close()


# --- capsules ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def hello_capsule(tmp_path_factory) -> Path:
    """A copy of examples/hello (built components), so tests can edit it freely."""
    src = ROOT / "examples" / "hello"
    if not (src / "capsule.wasm").is_file() or not (src / "greet" / "greet.wasm").is_file():
        proc = subprocess.run([str(ROOT / "scripts" / "build-examples")], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"scripts/build-examples failed:\n{proc.stderr[-3000:]}")
    dst = tmp_path_factory.mktemp("capsules") / "hello"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("workdir", ".murmur", "__pycache__"))
    return dst


@pytest.fixture(scope="session")
def shell_capsule(tmp_path_factory) -> Path:
    """A capsule whose component runs shell tools: `sh` allowed, a small aggregate pids bound.

    The task is JSON for tests/wasm/guests/capsule_probe: {"op": "invoke", "calls": [{"tool": "sh",
    "data": "{\\"command\\": ...}"}]}; the answer is the tool outcomes as JSON.
    """
    try:
        from mur.wasm.build import build_component
    except ImportError as exc:  # pragma: no cover
        pytest.skip(f"no component build support: {exc}")
    if shutil.which("componentize-py") is None and not (Path(sys.executable).parent / "componentize-py").is_file():
        pytest.skip("componentize-py is not installed")
    wasm = build_component(ROOT / "tests" / "wasm" / "guests" / "capsule_probe", "capsule")
    d = tmp_path_factory.mktemp("capsules") / "shellcap"
    d.mkdir()
    shutil.copyfile(wasm, d / "capsule.wasm")
    (d / "murmur.yaml").write_text(
        "name: shellcap\nversion: \"1.0.0\"\n"
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n"
        "capabilities:\n  containment: scoped\n  shell:\n    allow: [sh, sleep]\n"
        "  resources:\n    cgroup_pids_max: 12\n    cgroup_memory_bytes: 268435456\n"
        "  limits:\n    deadline_seconds: 300\n")
    return d

