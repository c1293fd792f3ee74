"""A session's trace.jsonl: the event schema (one owner), the writer, the reader and its views.

  events.py     the event types, as constants
  writer.py     TraceWriter: appends events, feeds listeners (OTel export, hooks)
  reader.py     load_events: the one reader
  sessions.py   session addresses (`mur trace`, `mur eval`): full id, suffix, @N, path
  summary.py    one session's numbers (show, diff, report agree through it)
  redundant.py  redundant-call detection (declared `state_effect` / `resource_id`)
  fmt.py        upstream's number formats
  show.py       `mur trace show`      timeline.py     its Timeline section
  steps.py      `mur trace steps`     diff.py         `mur trace diff`
  report.py     `mur trace report`    report_view.py  its text
"""
