"""The loopback model server: scripted replies over JSON and SSE, errors, delays, recording."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import httpx
import pytest

from mur.errors import MurError
from mur.testing.model_script import load_script, parse_script
from mur.testing.modelserver import EXHAUSTED_MESSAGE, ModelServer

REQUEST = {"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def post(server: ModelServer, body: dict | None = None, *, path: str = "/v1/messages", timeout: float = 10.0):
    return httpx.post(server.url + path, json=body or REQUEST, timeout=timeout)


def read_sse(response: httpx.Response) -> list[tuple[str, dict]]:
    events, name = [], None
    for line in response.text.splitlines():
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[len("data: "):])))
    return events


def test_script_parsing_expands_repeat_and_defaults():
    replies = parse_script([
        "plain text",
        {"tool_use": [{"name": "a", "input": {"x": 1}}, {"name": "b"}], "text": "calling", "repeat": 2},
        {"error": 429},
        {"malformed": True, "delay": 0.5},
    ])
    assert [r.kind for r in replies] == ["text", "tool_use", "tool_use", "error", "malformed"]
    assert replies[0].text == "plain text"
    assert [c.name for c in replies[1].tool_calls] == ["a", "b"]
    assert replies[3].error.type == "rate_limit_error"
    assert replies[4].delay == 0.5


@pytest.mark.parametrize("entry, words", [
    ({"txt": "typo"}, "unknown key"),
    ({"tool_use": {"input": {}}}, "string 'name'"),
    ({"error": {"message": "no status"}}, "integer 'status'"),
    ({"text": "x", "repeat": 0}, "repeat"),
    ({"text": "x", "usage": {"input_tokens": "many"}}, "usage"),
])
def test_script_rejects_bad_entries(entry, words):
    with pytest.raises(MurError) as err:
        parse_script([entry])
    assert err.value.code == "E-IO-003" and words in err.value.message


def test_load_script_reads_yaml_and_reports_missing_file(tmp_path):
    path = tmp_path / "script.yaml"
    path.write_text("- text: hello\n  usage: {input_tokens: 3, output_tokens: 1}\n")
    assert load_script(path)[0].usage == {"input_tokens": 3, "output_tokens": 1}
    with pytest.raises(MurError) as err:
        load_script(tmp_path / "nope.yaml")
    assert err.value.code == "E-IO-001"


def test_non_streaming_text_and_tool_use_replies(model_server):
    server = model_server([
        {"text": "hello", "usage": {"input_tokens": 12, "output_tokens": 3}},
        {"tool_use": {"name": "add", "input": {"numbers": [1, 2]}}, "text": "adding"},
    ])
    first = post(server).json()
    assert first["content"] == [{"type": "text", "text": "hello"}]
    assert first["stop_reason"] == "end_turn" and first["model"] == "claude-test"
    assert first["usage"] == {"input_tokens": 12, "output_tokens": 3}
    second = post(server).json()
    assert second["stop_reason"] == "tool_use"
    kinds = [b["type"] for b in second["content"]]
    assert kinds == ["text", "tool_use"]
    assert second["content"][1]["name"] == "add" and second["content"][1]["id"].startswith("toolu_")
    # default usage is derived from the sizes, and recorded as served
    assert second["usage"]["input_tokens"] >= 1 and second["usage"]["output_tokens"] >= 1
    assert server.served_usage() == {"input_tokens": 12 + second["usage"]["input_tokens"],
                                     "output_tokens": 3 + second["usage"]["output_tokens"]}


def test_streaming_reply_spells_out_the_message(model_server):
    server = model_server([{"tool_use": {"name": "add", "input": {"numbers": [4]}}, "text": "sum:",
                            "usage": {"input_tokens": 40, "output_tokens": 9}}])
    response = post(server, {**REQUEST, "stream": True}, path="/v1/messages?beta=true")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = read_sse(response)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 40
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert deltas[0] == {"type": "text_delta", "text": "sum:"}
    assert json.loads(deltas[1]["partial_json"]) == {"numbers": [4]}
    final = dict(events)["message_delta"]
    assert final["delta"]["stop_reason"] == "tool_use" and final["usage"]["output_tokens"] == 9
    recorded = server.requests[0]
    assert recorded.query == "beta=true" and recorded.streamed


def test_error_reply_carries_anthropic_envelope_and_retry_after(model_server):
    server = model_server([{"error": {"status": 429, "message": "slow down", "retry_after": 2}},
                           {"error": {"status": 500, "body": "plain failure"}}])
    first = post(server)
    assert first.status_code == 429 and first.headers["retry-after"] == "2"
    assert first.json() == {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    second = post(server)
    assert second.status_code == 500 and second.text == "plain failure"
    assert server.served_usage() == {"input_tokens": 0, "output_tokens": 0}


def test_malformed_reply_is_not_json(model_server):
    server = model_server([{"malformed": True}])
    response = post(server)
    assert response.status_code == 200
    with pytest.raises(ValueError):
        response.json()


def test_exhausted_script_answers_500(model_server):
    server = model_server([])
    response = post(server)
    assert response.status_code == 500 and EXHAUSTED_MESSAGE in response.text
    assert server.requests[0].reply_kind == "exhausted"


def test_slow_reply_is_recorded_on_arrival_and_times_a_client_out(model_server):
    server = model_server([{"text": "late", "delay": 6.0}])
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        post(server, timeout=0.3)
    assert time.monotonic() - started < 4.0  # the client gave up long before the 6 s reply (generous for loaded CI)
    assert [r.reply_kind for r in server.requests] == ["text"]


def test_requests_are_recorded_with_headers_and_count_tokens_is_free(model_server):
    server = model_server([{"text": "one"}])
    httpx.post(server.url + "/v1/messages/count_tokens", json=REQUEST, timeout=5)
    httpx.post(server.url + "/v1/messages", json=REQUEST, headers={"x-api-key": "k1"}, timeout=5)
    assert [r.reply_kind for r in server.message_requests()] == ["text"]
    assert server.message_requests()[0].headers["x-api-key"] == "k1"
    assert server.remaining == 0


def test_parallel_requests_each_get_one_reply(model_server):
    server = model_server([{"text": f"r{i}"} for i in range(6)])
    texts: list[str] = []

    def worker():
        texts.append(post(server).json()["content"][0]["text"])

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(texts) == [f"r{i}" for i in range(6)]


def test_binds_loopback_only():
    with pytest.raises(MurError):
        ModelServer([], host="0.0.0.0")


def test_module_entry_point_prints_url_and_serves(tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "from the cli", "usage": {"input_tokens": 5, "output_tokens": 2}}]))
    record = tmp_path / "record.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "mur.testing.modelserver", "--script", str(script),
                             "--record", str(record)], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        reply = httpx.post(url + "/v1/messages", json=REQUEST, timeout=5).json()
        assert reply["content"][0]["text"] == "from the cli"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines[0]["usage"] == {"input_tokens": 5, "output_tokens": 2}
