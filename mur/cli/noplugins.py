"""pydantic's plugins, off for a mur process, and not looked for.

pydantic looks for plugins in every installed distribution's entry points when it builds the first
model (a scan of site-packages on each start); mur uses none, so its processes turn them off with
pydantic's documented switch, PYDANTIC_DISABLE_PLUGINS (a user's own value is kept). Off, the plugin
loader is asked only `get_plugins()` and answers "none" before looking; yet importing it imports
importlib.metadata (email, zipfile, csv...): ~12 ms and ~4.5 MB of every process that builds a model.
`disable()` puts a stand-in in its place that answers the same "none"; for anything else a future
pydantic might ask of it, the stand-in loads the real loader and answers as it does.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

LOADER = "pydantic.plugin._loader"
OFF = ("__all__", "1", "true")  # the values with which pydantic's get_plugins() returns none at once


class _NoPlugins(types.ModuleType):
    """The loader's stand-in: no plugins; anything else from the real loader."""

    @staticmethod
    def get_plugins() -> tuple[()]:
        return ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's own questions (`__path__`: not a package)
            raise AttributeError(name)
        import importlib.machinery
        import importlib.util

        import pydantic.plugin

        spec = importlib.machinery.PathFinder.find_spec(LOADER, list(pydantic.plugin.__path__))
        if spec is None or spec.loader is None:
            raise AttributeError(name)
        real = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(real)
        sys.modules[LOADER] = real
        return getattr(real, name)


def disable() -> None:
    """Plugins off for this process (unless the user chose otherwise), and the loader's import spared."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if os.environ["PYDANTIC_DISABLE_PLUGINS"] in OFF and LOADER not in sys.modules:
        sys.modules[LOADER] = _NoPlugins(LOADER)
