"""Render mur-host's user-data with the real terraform (offline: the module is provider-free)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "terraform" / "modules" / "mur-host"


def tf(args: list[str], cwd: Path, data: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_DATA_DIR": str(data), "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1",
           "TF_CLI_CONFIG_FILE": "/dev/null"}
    return subprocess.run(["terraform", *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def terraform_user_data(tmp_path: Path, **variables) -> str:
    """Render through the real module: a root config calling it, `terraform apply` on local state."""
    root = tmp_path / "root"
    root.mkdir(parents=True)
    args = "\n".join(f"  {k} = {json.dumps(v)}" for k, v in variables.items())
    # a relative source, as a checkout or a git source (//terraform/modules/mur-host) gives: terraform
    # copies an absolute-path module alone, without the deploy/ folder its template lives in
    source = os.path.relpath(MODULE, root)
    (root / "main.tf").write_text(f'module "h" {{\n  source = "{source}"\n{args}\n}}\n'
                                  'output "user_data" {\n  value = module.h.user_data\n  sensitive = true\n}\n')
    data = tmp_path / "tfdata"
    for cmd in (["init", "-backend=false", "-input=false"], ["apply", "-auto-approve", "-input=false",
                                                            f"-state={tmp_path / 'tf.state'}"]):
        proc = tf(cmd, root, data)
        if proc.returncode != 0:
            raise RuntimeError(f"terraform {cmd[0]} failed:\n{proc.stdout}{proc.stderr}")
    proc = tf(["output", "-raw", f"-state={tmp_path / 'tf.state'}", "user_data"], root, data)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return proc.stdout


def inputs_variables(inp) -> dict:
    """mur.provision.userdata.UserDataInputs -> the module's variables."""
    return {"ssh_authorized_keys": list(inp.ssh_authorized_keys), "deploy_user": inp.deploy_user,
            "mur_version": inp.mur_version, "kernel": inp.kernel, "ssh_host_key_public": inp.ssh_host_key_public,
            "ssh_host_key_private": inp.ssh_host_key_private}
