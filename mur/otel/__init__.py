"""OTel export of a session's trace (a consumer of the schema in mur.trace).

  spans.py     trace events -> OTel span tree (pure; nothing is sent)
  exporter.py  OtelExporter: a TraceWriter listener that sends one OTLP/HTTP batch at session end
"""
