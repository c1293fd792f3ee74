"""Fleets: one capsule on several targets, rolled out together (docs/deploy.md, "Fleets").

    config.py   deploy.yaml as pydantic models (+ destinations, `mur schema fleet`)
    plan.py     the file resolved: selected targets, their settings and environment, batches (pure)
    rollout.py  lock, preflight everywhere, gated batches, stop and return, the report
    lock.py     one rollout per fleet: this machine's lock and the lock on every target
    gate.py     what a target passes before the rollout moves on (health with the token, smoke task)
    address.py  NAME@TARGET, names covering a fleet, `mur send NAME` picking an answering target
    ops.py      fleet-wide status/stop/destroy/rollback/logs
    view.py     the grouped view of every deployment
"""
