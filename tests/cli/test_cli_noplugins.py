"""mur.cli.noplugins: pydantic's plugins off unless the user chose, the loader's import spared, and
anything else pydantic asks of the loader answered by the real one. In a fresh interpreter each:
the stand-in is per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, os, sys
from mur.cli import noplugins
noplugins.disable()
from mur.manifest.load import parse_capsule
capsule = parse_capsule('name: c\\nversion: "1"\\n').capsule
loader = sys.modules.get("pydantic.plugin._loader")
report = {"env": os.environ.get("PYDANTIC_DISABLE_PLUGINS"), "name": capsule.name,
          "stand_in": type(loader).__name__ == "_NoPlugins", "metadata": "importlib.metadata" in sys.modules}
if report["stand_in"]:
    report["group"] = loader.PYDANTIC_ENTRY_POINT_GROUP  # not the stand-in's: the real loader's
    report["real_after"] = type(sys.modules["pydantic.plugin._loader"]).__name__ == "module"
print(json.dumps(report))
"""


def probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_off_by_default_and_models_build_without_importlib_metadata():
    got = probe()
    assert got["env"] == "__all__" and got["name"] == "c"
    assert got["stand_in"] and not got["metadata"]  # a model built: importlib.metadata was never imported
    assert got["group"] == "pydantic" and got["real_after"]  # anything else: from the real loader


def test_a_users_own_choice_is_kept_and_the_real_loader_used():
    got = probe(PYDANTIC_DISABLE_PLUGINS="some_plugin")  # only that one off: pydantic looks for the rest
    assert got["env"] == "some_plugin" and got["name"] == "c" and not got["stand_in"]
