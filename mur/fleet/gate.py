"""The gate a target passes before a rollout moves on: its service answers with the deployment's token
(agent card + an authenticated call), and, when the fleet file asks for one, a smoke task completes
(with the expected text in its answer). Reached through the target's port seam (an SSH forward for a
loopback-bound service), so it checks exactly what clients will reach.
"""

from __future__ import annotations

from typing import Any

from mur.deploy.targets.base import Target
from mur.fleet.config import Smoke


def smoke_task(host: str, port: int, token: str | None, pin: str | None, smoke: Smoke) -> dict[str, Any]:
    """Send the smoke message; {"ok", "answer"} or {"ok": False, "error"}."""
    from mur.a2a.client import Credentials, send_task, task_text
    from mur.errors import MurError

    url = f"{'https' if pin else 'http'}://{host}:{port}"
    try:
        task = send_task(url, smoke.message, timeout=smoke.timeout, credentials=Credentials(token=token, pin_sha256=pin))
    except MurError as err:
        return {"ok": False, "error": f"smoke task: {err.message}"}
    state = (task.get("status") or {}).get("state")
    answer = task_text(task).strip()
    if state != "completed":
        return {"ok": False, "error": f"smoke task ended {state}: {answer[:300]}", "answer": answer}
    if smoke.expect is not None and smoke.expect not in answer:
        return {"ok": False, "error": f"smoke task answered {answer[:300]!r}, without {smoke.expect!r}", "answer": answer}
    return {"ok": True, "answer": answer}


def check(target: Target, port: int, token: str | None, pin: str | None, smoke: Smoke | None,
          wait: float = 10.0) -> dict[str, Any]:
    """Health with the token, then the smoke task, on 127.0.0.1:`port` of the target."""
    from mur.deploy.health import wait_until_up

    with target.open_port(port) as (host, local):
        health = wait_until_up(host, local, wait, token=token, pin=pin)
        if not health.get("ok"):
            return {"ok": False, "error": f"health: {health.get('error')}"}
        if smoke is None:
            return {"ok": True}
        return smoke_task(host, local, token, pin, smoke)
