"""Hook components (`runtime: hook`) at the session's lifecycle points (docs/hooks.md).

  config.py    a hook's contract from its own murmur.yaml (binding, execution_mode, commit_policy)
  records.py   trace events -> murmur:hook/lifecycle calls, hook-output values back (pure data)
  instance.py  one long-lived component instance per hook, with its log
  hookset.py   dispatch, the decisions hooks may commit, async workers, run-inference
  launch.py    build_hooks: the session's HookSet from plain data, and the hooks' MURMUR_* env
"""
