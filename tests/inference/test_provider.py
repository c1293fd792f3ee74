"""Provider failures through a real loopback server: which are retried, how long, what the user sees."""

from __future__ import annotations

import pytest

from mur.errors import MurError
from mur.inference.provider import ProviderError, RetryPolicy, parse_retry_after, with_retries
from mur.testing.anthropic import provider_message

REQUEST = {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


def test_success_sends_the_messages_api_request(model_server, make_client):
    server = model_server([{"text": "ok", "usage": {"input_tokens": 4, "output_tokens": 1}}])
    reply = make_client(server).complete(REQUEST)
    assert reply["content"][0]["text"] == "ok"
    sent = server.requests[0]
    assert sent.headers["x-api-key"] == "sk-test-key" and sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.body["stream"] is False and sent.body["max_tokens"] == 32


def test_401_is_not_retried_and_keeps_the_provider_message(model_server, make_client, sleeps):
    server = model_server([{"error": {"status": 401, "message": "invalid x-api-key"}}, {"text": "never"}])
    with pytest.raises(MurError) as err:
        make_client(server).complete(REQUEST)
    assert err.value.code == "E-RUN-016"
    assert err.value.message == "inference provider failed: HTTP 401: authentication_error: invalid x-api-key"
    assert err.value.hint.startswith("the provider refused the credentials")  # every failure says what to check
    assert len(server.requests) == 1 and sleeps == []


def test_429_retry_after_is_honoured_then_success(model_server, make_client, sleeps):
    server = model_server([{"error": {"status": 429, "retry_after": 7}}, {"error": {"status": 529}},
                           {"text": "finally"}])
    reply = make_client(server).complete(REQUEST)
    assert reply["content"][0]["text"] == "finally"
    assert sleeps == [7.0, 1.0]  # retry-after as given, then exponential backoff (0.5 * 2**1)


def test_5xx_is_retried_then_fails_with_the_last_message(model_server, make_client, sleeps):
    server = model_server([{"error": {"status": 503, "message": f"down {i}"}} for i in range(4)])
    with pytest.raises(MurError) as err:
        make_client(server, retries=3).complete(REQUEST)
    assert err.value.message == "inference provider failed: HTTP 503: api_error: down 3 (after 4 attempts)"
    assert err.value.hint == "the provider is failing or rate limiting: try again later"
    assert sleeps == [0.5, 1.0, 2.0] and server.remaining == 0


def test_timeout_is_retried_then_fails(model_server, make_client, sleeps):
    server = model_server([{"text": "too late", "delay": 2}] * 2)
    with pytest.raises(MurError) as err:
        make_client(server, timeout=0.3, retries=1).complete(REQUEST)
    assert "timed out" in err.value.message and "(after 2 attempts)" in err.value.message
    assert err.value.hint.startswith("the provider did not answer in time")
    assert len(server.requests) == 2


def test_malformed_json_fails_without_retry(model_server, make_client, sleeps):
    server = model_server([{"malformed": '{"content": [oops'}, {"text": "never"}])
    with pytest.raises(MurError) as err:
        make_client(server).complete(REQUEST)
    assert "malformed provider response" in err.value.message and "oops" in err.value.message
    assert "Anthropic-compatible" in err.value.hint
    assert len(server.requests) == 1 and sleeps == []


def test_connection_refused_is_retried(make_client, sleeps, model_server):
    server = model_server([])
    server.stop()  # nothing listens on its port any more
    with pytest.raises(MurError) as err:
        make_client(server, retries=2).complete(REQUEST)
    assert err.value.code == "E-RUN-016" and "(after 3 attempts)" in err.value.message
    assert err.value.hint.startswith("nothing answers at the provider's address: check inference.base_url")


def test_policy_caps_and_helpers():
    policy = RetryPolicy(base_delay=1, max_delay=5, max_retry_after=10)
    assert policy.delay(10, ProviderError("http", "x", status=500)) == 5
    assert policy.delay(0, ProviderError("http", "x", status=429, retry_after=600)) == 10
    assert parse_retry_after("1.5") == 1.5 and parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert provider_message(b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}') == \
        "overloaded_error: busy"
    assert provider_message("<html>bad gateway</html>") == "<html>bad gateway</html>"
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ProviderError("connection", "reset")
        return {"ok": True}

    retries = []
    assert with_retries(flaky, RetryPolicy(base_delay=0), sleep=lambda s: None,
                        on_retry=lambda n, e, w: retries.append(n)) == {"ok": True}
    assert retries == [1, 2]
