"""The door serves with h11 and asyncio only: answering a client loads no web framework.

Every capsule imports its door at its first client (a deploy's health check is one) and keeps what
it imported for as long as it idles; uvicorn and starlette brought click, multiprocessing and anyio
along (~4.7 MB per capsule). This runs a real door in a fresh interpreter, has it answer the card,
a JSON-RPC call and a stream over a socket, and lists what got imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_THE_DOOR = ("uvicorn", "starlette", "anyio", "click", "multiprocessing", "sniffio", "httptools", "uvloop")

SCRIPT = r"""
import json, socket, sys
from mur.a2a.listen import bind_socket
from mur.a2a.server import Door, ServerThread
from mur.a2a.sse import EventHub
from mur.a2a.tasks import TaskRegistry

sock = bind_socket("127.0.0.1", 0)
port = sock.getsockname()[1]
door = Door(registry=TaskRegistry("queue", 4), hub=EventHub(), card={"name": "t", "version": "0.1.0"},
            task_acceptance="queue", conversation="shared", fallback_host=f"127.0.0.1:{port}")
server = ServerThread(door, sock)
server.start()

def ask(raw):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(raw)
        out = b""
        while chunk := c.recv(65536):
            out += chunk
        return out

body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "tsk_x"}}).encode()
answers = [
    ask(b"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
    ask(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)),
    ask(b"GET /nothing HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
]
server.stop()
print(json.dumps({"status": [a.split(b" ", 2)[1].decode() for a in answers], "modules": sorted(sys.modules)}))
"""


def test_answering_clients_loads_no_web_framework():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["status"] == ["200", "200", "404"]
    loaded = [m for m in seen["modules"] if m.split(".")[0] in NOT_FOR_THE_DOOR]
    assert loaded == []
    assert "h11" in seen["modules"]
