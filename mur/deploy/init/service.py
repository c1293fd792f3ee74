"""What every init system runs: the `mur run` command line, its environment, the prestart script."""

from __future__ import annotations

import shlex

from mur.deploy.runline import run_argv
from mur.deploy.steps import Layout, ServiceConfig

__all__ = ["prestart_script", "run_argv", "service_env"]


def prestart_script(lay: Layout, keep_sessions: int) -> str:
    """Run as the service user before every (re)start, by either init system.

    Sweeps staged tool payloads a killed run left in the service's TMPDIR and keeps only the newest
    `keep_sessions` session directories of the deployment, so a crash loop cannot fill the disk.
    """
    q = shlex.quote
    return ("#!/bin/sh\n# written by mur deploy: run before each start of the service\n"
            f"mkdir -p {q(lay.tmp_dir)} && chmod 700 {q(lay.tmp_dir)} && rm -rf {q(lay.tmp_dir)}/mur-payloads-*\n"
            f"ls -1dt {q(lay.releases)}/*/workdir/ses_* 2>/dev/null | tail -n +{int(keep_sessions) + 1} | "
            "while IFS= read -r d; do rm -rf -- \"$d\"; done\nexit 0\n")


def service_env(lay: Layout, svc: ServiceConfig, release: str) -> dict[str, str]:
    """The runtime's own variables for a service (beside the user's env file): the token and TLS
    files are the release's own (`release` is its final directory)."""
    env = {"HOME": lay.home, "MURMUR_A2A_TIMEOUT_SECS": "0", "MUR_RUNTIME_DIR": lay.runtime_dir,
           "TMPDIR": lay.tmp_dir, "MURMUR_A2A_TOKEN_FILE": lay.token_file(release)}
    if svc.tls:
        env.update({"MURMUR_A2A_TLS_CERT": lay.tls_cert(release), "MURMUR_A2A_TLS_KEY": lay.tls_key(release)})
    return env
