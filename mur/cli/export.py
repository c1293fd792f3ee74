"""`mur export k8s`: Kubernetes manifests for a capsule image.

    mur export k8s [-m murmur.yaml] --image TAG [-o DIR] [--sandbox] [--env K=V] [--env-file F] [--json]
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from mur.cli.render import emit


def _human(r: dict) -> str:
    lines = [f"∞ {r['kind']} and friends in {r['directory']}"]
    lines += [f"  {name}" for name in r["files"]]
    lines += [f"  note  {n}" for n in r["notes"]]
    lines.append(f"  next  copy {r['seccomp_profile']} to /var/lib/kubelet/seccomp/ on every node, "
                 f"then kubectl apply -f {r['directory']}")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Export a capsule for an orchestrator (Kubernetes).", no_args_is_help=True)

    @group.command("k8s")
    def k8s(
        manifest: Path = typer.Option(Path("murmur.yaml"), "--manifest", "-m", help="Capsule manifest."),
        image: str = typer.Option(..., "--image", help="The capsule's image (from mur image build / push)."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="Directory (default ./<name>-k8s)."),
        sandbox: bool = typer.Option(False, "--sandbox", help="A kubernetes-sigs/agent-sandbox Sandbox instead of a Deployment."),
        env: List[str] = typer.Option([], "--env", help="KEY=VALUE for the Secret (repeatable)."),
        env_file: Optional[Path] = typer.Option(None, "--env-file", help="KEY=VALUE file (default: .env next to the manifest)."),
        json_out: bool = typer.Option(False, "--json", help="One JSON line on stdout."),
    ) -> None:
        """Write a Deployment (or StatefulSet / Sandbox), Service, NetworkPolicy, Secret and seccomp profile."""
        from mur.deploy.capsule import gather
        from mur.export import export_k8s
        from mur.export.k8s import dns_label

        inputs = gather(manifest, env_args=list(env), env_file=env_file)
        out = output or Path.cwd() / f"{dns_label(inputs.name)}-k8s"
        emit(export_k8s(inputs, image, out, sandbox=sandbox).to_json(), json_out, _human)

    app.add_typer(group, name="export")
