"""Observability: OTel span export of a session's trace, a local OTLP/HTTP receiver, trace views.

  spans.py     trace events -> span tree (pure)
  otel.py      OtelExporter: a TraceWriter listener that exports one span tree at session end
  receiver.py  a small OTLP/HTTP receiver (tests, local debugging): python -m mur.observability.receiver
  sessions.py  session addresses for `mur trace` (full id, suffix, @N, path)
  timeline.py  trace.jsonl -> summary + timeline (`mur trace show`)
"""
