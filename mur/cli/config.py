"""`mur config set KEY VALUE [-g]` and `mur config show [--json]`."""

from __future__ import annotations

import sys

import typer


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Read or change ~/.murmur/config.yaml and .murmur/config.yaml.", no_args_is_help=True)

    @group.command("set")
    def set_(key: str = typer.Argument(..., help="registry.default, registry.index_url, inference.provider, "
                                                 "inference.model, inference.api_key or inference.endpoint."),
             value: str = typer.Argument(...),
             global_: bool = typer.Option(False, "--global", "-g", help="Write ~/.murmur/config.yaml, not ./.murmur/."),
             ) -> None:
        """Set one key in the project (default) or global config file."""
        from mur.manifest.configwrite import set_key

        path = set_key(key, value, global_)
        shown = "<hidden>" if key == "inference.api_key" else value
        print(f"set {key} = {shown} in {path}", file=sys.stderr)

    @group.command("show")
    def show(json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
        """The merged configuration (global, then project), api_key redacted."""
        from mur.cli.render import emit_json
        from mur.manifest.config import load_config

        cfg = load_config()
        inference = {k: ("<set>" if k == "api_key" else v) for k, v in cfg.inference.items()}
        data = {"files": [str(p) for p in cfg.files], "containment": cfg.containment,
                "registry": {"default": cfg.registry_default, "index_url": cfg.registry_index_url,
                             "remote_url": cfg.registry_remote_url,
                             "sources": [{k: v for k, v in s.items() if k != "token"} for s in cfg.registry_sources]},
                "inference": inference, "beta": {"enabled": cfg.beta_enabled},
                "deploy": {"release_source": cfg.release_source}}
        if json_out:
            emit_json(data)
            return
        print("files       " + (", ".join(data["files"]) or "(none: built-in defaults)"))
        print(f"containment {cfg.containment or '-'}")
        print(f"registry    default={cfg.registry_default or '-'} index_url={cfg.registry_index_url or '-'} "
              f"sources={','.join(s.get('name', '') for s in cfg.registry_sources) or '-'}")
        print("inference   " + (" ".join(f"{k}={v}" for k, v in inference.items()) or "-"))
        print(f"deploy      release_source={cfg.release_source or '-'}")

    app.add_typer(group, name="config")
