"""Hook components (`runtime: hook`): lifecycle observers and the few decisions they may commit.

`launch.build_hooks(...)` is the one entry point, called by the session after staging with plain
data (mur.session.hookwiring derives it); it returns a :class:`~mur.hooks.hookset.HookSet` (None
when the capsule declares no hook):

* `on_event(event)` — a trace listener. Each trace event that has a lifecycle function
  (mur.hooks.records) is dispatched to every hook bound to it, in manifest declaration order:
  blocking hooks inline, async hooks onto their worker's bounded queue (full queue: the event is
  dropped, logged, and traced as `hook_dispatch_error` with arm `queue-overflow`).
* `compactor()` — for the agent loop's `compactor=` when a blocking hook can commit
  `replace-context`; a hook `Err` (or trap) at on-compaction fails the session (upstream's rule).
* `on_task_end(outcome)` — for the loop's `on_task_end=`: the first `reopen-task`. The session
  hands both to mur.inference.loop.run_reopenable_task; this package never imports the loop.
* `on_stage(shell_allow)` — on-stage hooks' `write-manifests`, written to tools/<bin>/murmur.yaml.
* `close()` — drains async queues within a bounded budget (`drain` / `timeout` faults).

A hook `Err`, trap or limit never aborts the loop (except at on-compaction): the message is appended
to `<session workdir>/logs/hook-<name>.log` and a `hook_dispatch_error {hook_name, event, arm}` trace
event is written (arm `error`, or the unsupported arm's name). Hooks run default-deny (grants from
the capsule manifest only, mur.manifest.grants): no preopen unless `filesystem.scope`, an empty HTTP
allow list unless `network.allow`. Their environment is only the runtime's MURMUR_* variables.

  config.py    a hook's contract from its own murmur.yaml (binding, execution_mode, commit_policy)
  records.py   trace events -> murmur:hook/lifecycle calls, hook-output values back (pure data)
  instance.py  one long-lived component instance per hook, with its log
  hookset.py   dispatch, the decisions hooks may commit, async workers, run-inference
  launch.py    build_hooks, and the hooks' MURMUR_* environment (hook_env)
"""
