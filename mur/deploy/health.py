"""Is a deployed service up: its agent card answers, and it accepts the deployment's token.

Used on both sides: by deploy (through the target's port seam, `Target.open_port`) and by the
on-target smoke start (`mur supervise smoke`), so it imports the standard library only. The
agent card is public (A2A); a JSON-RPC call with the bearer token proves the service reads the
token the deployment gave it (401 means it does not). With TLS the certificate is accepted only
when its SHA-256 (DER) equals the recorded pin: deploy certificates are self-signed or the user's,
and the pin is what identifies them.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import ssl
import time
from typing import Any

CARD_PATH = "/.well-known/agent-card.json"


def _connection(host: str, port: int, pin: str | None, timeout: float) -> http.client.HTTPConnection:
    if not pin:
        return http.client.HTTPConnection(host, port, timeout=timeout)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # verified below by pin, before any byte is sent
    return http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)


def _request(conn: http.client.HTTPConnection, method: str, path: str, pin: str | None, token: str | None,
             body: bytes | None = None) -> tuple[int, bytes]:
    conn.connect()
    if pin:
        der = conn.sock.getpeercert(binary_form=True) or b""  # type: ignore[union-attr]
        got = hashlib.sha256(der).hexdigest()
        if got != pin.lower():
            raise ConnectionError(f"certificate fingerprint {got} does not match the pinned {pin}")
    headers = {"Host": f"127.0.0.1:{conn.port}"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def check_once(host: str, port: int, *, token: str | None = None, pin: str | None = None,
               timeout: float = 5.0) -> dict[str, Any]:
    """One check: {"ok", "agent_card"} or {"ok": False, "error"}."""
    try:
        conn = _connection(host, port, pin, timeout)
        try:
            status, body = _request(conn, "GET", CARD_PATH, pin, token)
        finally:
            conn.close()
        if status != 200:
            return {"ok": False, "error": f"agent card: HTTP {status}"}
        card = json.loads(body)
        if token:
            probe = json.dumps({"jsonrpc": "2.0", "id": "mur-health", "method": "tasks/get",
                                "params": {"id": "tsk_mur_health_check"}}).encode()
            conn = _connection(host, port, pin, timeout)
            try:
                status, _ = _request(conn, "POST", "/", pin, token, probe)
            finally:
                conn.close()
            if status == 401:
                return {"ok": False, "auth": False,
                        "error": "the service rejects the deployment's token (HTTP 401)"}
        return {"ok": True, "agent_card": card}
    except (OSError, ValueError, http.client.HTTPException, ssl.SSLError) as exc:
        return {"ok": False, "error": f"no agent card on {host}:{port}: {exc}"}


def wait_until_up(host: str, port: int, wait: float, **kw: Any) -> dict[str, Any]:
    """check_once until it succeeds or `wait` seconds pass (a rejected token does not get better)."""
    deadline = time.monotonic() + wait
    while True:
        res = check_once(host, port, **kw)
        if res["ok"] or res.get("auth") is False or time.monotonic() >= deadline:
            return res
        time.sleep(0.5)
