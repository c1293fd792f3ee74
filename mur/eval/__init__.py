"""Evaluation: scores murmur-hook-eval writes (eval.jsonl), and datasets run through a capsule.

  file.py  eval.jsonl read back (`mur eval show`)
  run.py   a dataset's cases through the capsule, one session each (`mur eval run`)
  diff.py  two runs side by side (`mur eval diff`)
"""
