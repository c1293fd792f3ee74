"""Inference: the agent loop and its two transports (docs/inference.md).

* ``transport: http`` — the runtime hands a WASM driver component (``runtime: driver``) the
  request as JSON (:mod:`mur.inference.driver`), the driver talks to the provider through the
  host's allow-listed HTTP import.
* ``transport: process`` — the ``claude`` CLI runs as a subprocess speaking stream-json
  (:mod:`mur.inference.process`).

:mod:`mur.inference.loop` is the agent loop (model-visible tools, max_turns, compaction, task
reopening) over a ``ModelClient`` and a ``ToolBox``; :mod:`mur.testing.modelserver` is a loopback
Anthropic-compatible server replaying scripted replies, for tests and the offline demo.
"""
