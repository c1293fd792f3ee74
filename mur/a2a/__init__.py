"""Capsules as services: the A2A JSON-RPC door, the task registry and the lifecycle loop.

``mur run`` plugs its task executor into :class:`mur.a2a.lifecycle.CapsuleService`; the CLI
commands ``mur send`` / ``mur watch`` use :mod:`mur.a2a.client`. See docs/a2a.md.
"""
