"""`mur config set|get|unset KEY [-g]` and `mur config show [--json]`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer


def _keys() -> list[str]:
    from mur.manifest.configwrite import KEYS

    return list(KEYS)


Key = Annotated[str, typer.Argument(autocompletion=_keys, help="A config key; `mur config show` lists them.")]
Global = Annotated[
    bool, typer.Option("--global", "-g", help="The global file ~/.murmur/config.yaml, not ./.murmur/config.yaml.")
]

app = typer.Typer(help="Read or change ~/.murmur/config.yaml and .murmur/config.yaml.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="config")


@app.command("set")
def set_(key: Key, value: str = typer.Argument(...), global_: Global = False) -> None:
    """Set one key in the project (default) or global config file; the value is checked first."""
    from mur.manifest.configwrite import SECRET, set_key

    path = set_key(key, value, global_)
    shown = "<hidden>" if key == SECRET else value
    print(f"set {key} = {shown} in {path}", file=sys.stderr)


@app.command("get")
def get(key: Key,
        global_: bool = typer.Option(False, "--global", "-g", help="Only what the global file says."),
        json_out: bool = typer.Option(False, "--json", help="One JSON line: key, value, file.")) -> None:
    """Print a key's effective value (project over global, as `mur run` reads it); api_key shows as <set>."""
    from mur.cli.render import emit_json, note
    from mur.manifest.configwrite import get_key

    setting = get_key(key, global_)
    if json_out:
        emit_json(setting.to_json())
    elif setting.value is None:
        note(f"{key} is not set")
    else:
        print(setting.to_json()["value"])
        note(f"(from {setting.file or 'the built-in default'})")


@app.command("unset")
def unset(key: Key, global_: Global = False) -> None:
    """Remove one key from the project (default) or global config file."""
    from mur.manifest.configwrite import unset_key

    path, removed = unset_key(key, global_)
    print(f"unset {key} in {path}" if removed else f"{key} was not set in {path}", file=sys.stderr)


@app.command("show")
def show(json_out: bool = typer.Option(False, "--json", help="One JSON line.")) -> None:
    """The merged configuration (global, then project), api_key redacted, and the settable keys."""
    from mur.cli.render import emit_json
    from mur.manifest.config import load_config
    from mur.manifest.configwrite import KEYS

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
          f"remote_url={cfg.registry_remote_url or '-'} "
          f"sources={','.join(s.get('name', '') for s in cfg.registry_sources) or '-'}")
    print("inference   " + (" ".join(f"{k}={v}" for k, v in inference.items()) or "-"))
    print(f"deploy      release_source={cfg.release_source or '-'}")
    print()
    print("settable keys (mur config set KEY VALUE [-g]):")
    width = max(map(len, KEYS))
    for key, spec in KEYS.items():
        print(f"  {key.ljust(width)}  {spec.about}")
