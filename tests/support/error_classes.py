"""One instance of every exception class a foreign library defines: what the totality tests of its
adapter raise at every operation (tests/engine/test_engine_errors.py, tests/deploy/test_deploy_errors.py)."""

from __future__ import annotations

import inspect


def instances(module, base=Exception) -> list[BaseException]:
    """One instance of every exception class a module defines (dummy constructor arguments)."""
    out = []
    for _name, cls in inspect.getmembers(module, inspect.isclass):
        if not issubclass(cls, base) or cls.__module__ != module.__name__:
            continue
        params = [p for p in inspect.signature(cls.__init__).parameters.values()
                  if p.name != "self" and p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
        try:
            out.append(cls(*["x"] * len(params)))
        except Exception:  # noqa: BLE001 - some want typed arguments
            out.append(cls.__new__(cls))
    return out
