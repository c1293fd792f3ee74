"""Test and demo tools: not part of the product (nothing under mur/ outside this package imports it).

  otlp_receiver.py  a real OTLP/HTTP receiver on 127.0.0.1 (python -m mur.testing.otlp_receiver)
  modelserver.py    a loopback Anthropic-compatible model server replaying a reply script
                    (python -m mur.testing.modelserver); model_script.py parses that script
  a2a_harness.py    a CapsuleService on a background thread, for tests and bench/
  anthropic.py      a ModelClient speaking the Messages API over httpx (the agent loop's tests)
  toolregistry.py   name -> handler, the `invoke` a capsule component's tool calls reach in tests
  terminal.py       a `mur` command as a terminal's foreground job (Ctrl-C, stderr on a pty)

tests/testing/test_import_graph.py keeps `mur run` and the CLI from importing this package.
"""
