"""`mur export k8s`: Kubernetes manifests for a capsule image.

    mur export k8s [-m murmur.yaml] --image REF [-o DIR] [--namespace NS] [--token-file FILE]
                   [--seccomp localhost|runtime-default] [--sandbox] [--env K=V] [--env-file F] [--json]
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from mur.cli.options import Manifest
from mur.cli.render import emit


def _human(r: dict) -> str:
    ns = f", namespace {r['namespace']}" if r["namespace"] else ""
    lines = [f"∞ {r['kind']} and friends in {r['directory']} (image {r['image']}{ns})"]
    lines += [f"  {name}" for name in r["files"]]
    lines += [f"  note  {n}" for n in r["notes"]]
    if r["seccomp_profile"]:
        lines.append(f"  next  copy {r['directory']}/{r['seccomp_profile']} to /var/lib/kubelet/seccomp/ on every node "
                     "(or export with --seccomp runtime-default; docs/kubernetes.md)")
    lines.append(f"  next  kubectl apply -f {r['directory']}")
    if r["kind"] != "Sandbox":
        kns = f" -n {r['namespace']}" if r["namespace"] else ""
        lines.append(f"  send  kubectl{kns} port-forward svc/{r['name']} {r['port']}:{r['port']} &  "
                     f"mur send 127.0.0.1:{r['port']} 'hello' --token-file {r['token_file']}")
    return "\n".join(lines) + "\n"


def k8s(
    manifest: Manifest = Path("murmur.yaml"),
    image: str = typer.Option(..., "--image", help="The capsule's image, pushed (mur image build + push): "
                              "NAME[:TAG] or NAME@sha256:DIGEST; the manifests name it by digest."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Directory (default ./<name>-k8s)."),
    namespace: Optional[str] = typer.Option(None, "--namespace", "-n", help="Namespace of every object (default: kubectl's)."),
    token_file: Optional[Path] = typer.Option(None, "--token-file", help="The A2A bearer token (mode 0600); default: generated into DIR/a2a-token."),
    seccomp: str = typer.Option("localhost", "--seccomp", help="localhost (the shipped mur-landlock.json, copied to every node) or runtime-default."),
    sandbox: bool = typer.Option(False, "--sandbox", help="A kubernetes-sigs/agent-sandbox Sandbox instead of a Deployment."),
    env: List[str] = typer.Option([], "--env", help="KEY=VALUE for the Secret (repeatable)."),
    env_file: Optional[Path] = typer.Option(None, "--env-file", help="KEY=VALUE file (default: .env next to the manifest)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line on stdout."),
) -> None:
    """Write a Deployment (or StatefulSet / Sandbox), Service, NetworkPolicy, Secrets and seccomp profile."""
    from mur.resolve.shipped import ship
    from mur.export import export_k8s
    from mur.export.k8s import dns_label

    inputs = ship(manifest, env_args=list(env), env_file=env_file)
    out = output or Path.cwd() / f"{dns_label(inputs.name)}-k8s"
    result = export_k8s(inputs, image, out, sandbox=sandbox, namespace=namespace, seccomp=seccomp,
                        token_file=token_file)
    emit(result.to_json(), json_out, _human)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Export a capsule for an orchestrator (Kubernetes).", no_args_is_help=True)
    group.command("k8s")(k8s)
    app.add_typer(group, name="export")
