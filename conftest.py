"""Repository-wide pytest setup: marker-based skips for tests that need real system components.

CI (.ci/run) provides every component, so CI skips nothing; on a bare machine the tests that need
Docker, qemu, root, Landlock, sshd or the claude CLI skip with the reason instead of failing, and so
do tests that need cgroup rights or namespaces where this host measurably has neither (ENVIRONMENT).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess

import pytest

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
# A service's `mur run` goes to a capsule host (docs/run.md), one per HOME, which outlives its last
# capsule by MUR_CAPSULE_HOST_IDLE_SECS: short here, so hundreds of test HOMEs do not keep hundreds
# of idle hosts (each test that measures the idle exit sets its own).
os.environ.setdefault("MUR_CAPSULE_HOST_IDLE_SECS", "5")

# A runner that starts the suite as a background job of a non-interactive shell hands it SIGINT and
# SIGQUIT ignored, and an ignored signal survives exec: every mur the tests start would then ignore the
# Ctrl-C the interrupt tests send (mur keeps an inherited SIG_IGN, as nohup users expect). The suite
# tests a terminal user's mur, so it restores the terminal's dispositions for itself and its children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@functools.lru_cache(maxsize=None)
def _docker() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0


@functools.lru_cache(maxsize=None)
def _landlock() -> bool:
    try:
        from mur.sandbox.probe import probe_host

        return probe_host().landlock_abi > 0
    except Exception:  # noqa: BLE001
        return False


def _claude() -> bool:
    return bool(os.environ.get("MUR_CLAUDE_BIN") or shutil.which("claude"))


CHECKS = {
    "requires_docker": (_docker, "needs a running Docker engine (.ci/run starts one)"),
    "requires_qemu": (lambda: bool(shutil.which("qemu-system-x86_64") and shutil.which("debootstrap")),
                      "needs qemu-system-x86_64 and debootstrap"),
    "requires_landlock": (_landlock, "needs a Landlock-capable kernel"),
    "requires_root": (lambda: os.geteuid() == 0, "needs root"),
    "requires_sshd": (lambda: os.path.exists("/usr/sbin/sshd"), "needs openssh-server"),
    "requires_claude": (_claude, "needs the npm claude CLI (.ci/install-claude.sh)"),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for name, (check, reason) in CHECKS.items():
            if item.get_closest_marker(name) is not None and not check():
                item.add_marker(pytest.mark.skip(reason=reason))


@functools.lru_cache(maxsize=None)
def _cgroup_rights() -> bool:
    """mur can create a session cgroup here (the probe makes and removes one)."""
    try:
        from mur.sandbox.probe import probe_host

        return probe_host().cgroup_delegated
    except Exception:  # noqa: BLE001
        return False


@functools.lru_cache(maxsize=None)
def _namespaces() -> bool:
    """`unshare` may make a mount namespace here (what the disk-full and mount tests do), and mur can
    make a session's network, IPC and pid namespaces (the probe builds and discards them)."""
    argv = ["unshare", "--mount", "true"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--mount", "true"]
    try:
        if subprocess.run(argv, capture_output=True, timeout=20).returncode != 0:
            return False
        from mur.sandbox.probe import probe_host

        return probe_host().netns
    except Exception:  # noqa: BLE001
        return False


def _examples_built() -> bool:
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")
    return all(os.path.isfile(os.path.join(examples, *p)) for p in (
        ("murmur-driver-anthropic", "murmur-driver-anthropic.wasm"), ("hello", "capsule.wasm"),
        ("hello", "greet", "greet.wasm")))


# Rights a fresh machine or a plain container may lack, which many tests need without naming them: a
# test that fails with the sign of one, on a host that (measured here, not guessed from the text) lacks
# it, is reported as skipped with the reason. Where the right exists (CI) every failure stays a failure.
ENVIRONMENT = (
    (_cgroup_rights, ("E-RUN-012", "CgroupUnavailable", "cannot create cgroup", "cgroup_delegated",
                      "no delegable cgroup", "Read-only file system: '/sys/fs/cgroup",
                      "Read-only file system: b'/sys/fs/cgroup"),
     "needs cgroup rights: mur cannot create a cgroup for a session's tools here (read-only or undelegated cgroupfs)"),
    (_namespaces, ("unshare failed: Operation not permitted", "cannot create a mount namespace", "netns=False",
                   "netns+egress-proxy", "namespaces.create"),
     "needs namespaces: unshare or a session's network namespace is refused here (a container's seccomp profile "
     "or capabilities)"),
    (_examples_built, ("run scripts/build-examples",),
     "needs the example components: run scripts/build-examples (CI does)"),
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.excinfo is None:
        return
    text = report.longreprtext + "".join(content for _name, content in report.sections)  # with captured output
    for capable, signs, reason in ENVIRONMENT:
        if any(sign in text for sign in signs) and not capable():
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: {reason}")
            return


@pytest.fixture
def model_server():
    """`model_server(replies)` -> a started loopback ModelServer (mur.testing), stopped after the test."""
    from mur.testing.modelserver import ModelServer

    started: list[ModelServer] = []

    def start(replies):
        server = ModelServer(replies).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
