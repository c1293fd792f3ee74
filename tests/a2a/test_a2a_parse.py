"""The door's request parsing as data: what JSON-RPC and A2A input is refused, with which code.

Every refusal here happens before a task exists; test_a2a_hostile_door.py checks the same over HTTP.
"""

from __future__ import annotations

import json
import math

import pytest

from mur.a2a import protocol as rpc


def refused(body: bytes | str) -> rpc.RpcError:
    with pytest.raises(rpc.RpcError) as info:
        rpc.parse_request(body.encode() if isinstance(body, str) else body)
    return info.value


def request(id_text: str, params: str = "{}", method: str = '"tasks/get"') -> str:
    return f'{{"jsonrpc":"2.0","id":{id_text},"method":{method},"params":{params}}}'


MESSAGE = '{"message":{"messageId":"m1","role":"user","parts":[%s]}}'


@pytest.mark.parametrize(
    "id_text",
    [
        "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e308", "9007199254740992", "-9007199254740992",
        "1.5", "9" * 5000, "true", "false", "{}", '{"a":1}', "[]", "[1]", '"' + "x" * 257 + '"', '"a\\ud800"',
    ],
)
def test_ids_json_rpc_cannot_echo_exactly_are_invalid_requests(id_text):
    err = refused(request(id_text))
    assert err.code == rpc.INVALID_REQUEST and err.request_id is None
    assert "id must be" in err.message


@pytest.mark.parametrize("id_text, value", [('"abc"', "abc"), ("9007199254740991", 2**53 - 1), ("-7", -7), ("3.0", 3.0), ("null", None)])
def test_ids_that_are_fine(id_text, value):
    assert rpc.parse_request(request(id_text).encode()).id == value


def test_a_notification_is_refused_and_nothing_is_answered_for_it_by_id():
    err = refused('{"jsonrpc":"2.0","method":"message/send","params":' + MESSAGE % '{"text":"x"}' + "}")
    assert err.code == rpc.INVALID_REQUEST and err.request_id is None
    assert "notification" in err.message


@pytest.mark.parametrize("body", ["[]", "[" + request("1") + "]", "[" + request("1") + "," + request("2") + "]", '"x"', "3", "null"])
def test_batches_and_non_objects_are_invalid_requests(body):
    err = refused(body)
    assert err.code == rpc.INVALID_REQUEST and "batches are not supported" in err.message


@pytest.mark.parametrize(
    "body, key",
    [
        ('{"jsonrpc":"2.0","id":1,"id":2,"method":"tasks/get"}', "id"),
        ('{"jsonrpc":"2.0","id":1,"method":"tasks/get","method":"message/send"}', "method"),
        ('{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"a","id":"b"}}', "id"),
    ],
)
def test_duplicate_keys_anywhere_are_refused(body, key):
    err = refused(body)
    assert err.code == rpc.INVALID_REQUEST and err.message == f"Invalid Request: duplicate key {key!r}"


@pytest.mark.parametrize(
    "body",
    [b"", b"{", b"\xff\xfe{}", b"\xef\xbb\xbf{}", "{\"id\": 1}\x00".encode(), b"[" * 200_000 + b"]" * 200_000,
     ('{"a":' * 100_000 + "1" + "}" * 100_000).encode(), b'{"jsonrpc":"2.0","id":1,"method":"x"} trailing'],
)
def test_what_is_not_utf8_json_is_a_parse_error(body):
    assert refused(body).code == rpc.PARSE_ERROR


@pytest.mark.parametrize(
    "params, path",
    [
        ('{"id":NaN}', "params.id"),
        ('{"message":{"messageId":"m","role":"user","parts":[{"text":"x","n":Infinity}]}}', "params.message.parts[0].n"),
        ('{"x":[1,2,-1e400]}', "params.x[2]"),
        ('{"x":' + "1" * 100 + "}", "params.x"),
    ],
)
def test_numbers_json_cannot_carry_inside_params_are_invalid_params(params, path):
    err = refused(request("7", params))
    assert err.code == rpc.INVALID_PARAMS and err.request_id == 7
    assert err.message.startswith(f"Invalid params: {path} is NaN, Infinity or a number out of range")


@pytest.mark.parametrize(
    "params, path",
    [
        (MESSAGE % '{"text":"a\\ud800b"}', "params.message.parts[0].text"),
        (MESSAGE % '{"text":"\\udfff"}', "params.message.parts[0].text"),
        ('{"message":{"messageId":"\\ud83d","role":"user","parts":[{"text":"x"}]}}', "params.message.messageId"),
        ('{"x\\udc00":1}', "params"),
    ],
)
def test_lone_surrogates_are_refused_where_they_are(params, path):
    err = refused(request('"r"', params, '"message/send"'))
    assert err.code == rpc.INVALID_PARAMS and err.request_id == "r"
    assert err.message.startswith(f"Invalid params: {path} ") and "lone UTF-16 surrogate" in err.message


def test_a_lone_surrogate_outside_params_is_an_invalid_request():
    err = refused(request("1", "{}", '"tasks/\\ud800"'))
    assert err.code == rpc.INVALID_REQUEST and err.message.startswith("Invalid Request: method holds a lone")


def test_surrogate_pairs_and_other_odd_unicode_are_text():
    text = "\\ud83d\\ude00 \\u202e\\u0000\\ufeff\\uffff e\\u0301 \\u4e2d"
    req = rpc.parse_request(request("1", MESSAGE % f'{{"text":"{text}"}}', '"message/send"').encode())
    message = rpc.parse_message(req.params)
    assert message.text == "\U0001f600 \u202e\x00\ufeff\uffff e\u0301 \u4e2d"


@pytest.mark.parametrize(
    "doc, why",
    [
        ({"jsonrpc": "1.0", "id": 1, "method": "tasks/get"}, 'jsonrpc must be "2.0"'),
        ({"id": 1, "method": "tasks/get"}, 'jsonrpc must be "2.0"'),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, "method must be a string"),
        ({"jsonrpc": "2.0", "id": 1}, "method must be a string"),
    ],
)
def test_envelope_fields_of_the_wrong_type(doc, why):
    err = refused(json.dumps(doc))
    assert err.code == rpc.INVALID_REQUEST and err.request_id == 1 and why in err.message


@pytest.mark.parametrize("params", ["[]", '"x"', "5", "true"])
def test_params_not_an_object(params):
    err = refused(request("1", params))
    assert err.code == rpc.INVALID_PARAMS


def message(**fields) -> dict:
    base = {"messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
    base.update(fields)
    return {"message": {k: v for k, v in base.items() if v is not ...}}


@pytest.mark.parametrize(
    "params, why",
    [
        ({"message": "x"}, "message must be an object"),
        (message(messageId=...), "message.messageId must be a non-empty string"),
        (message(messageId=""), "message.messageId must be a non-empty string"),
        (message(messageId=5), "message.messageId must be a non-empty string"),
        (message(messageId="m" * 257), "message.messageId is longer than 256"),
        (message(role=None), "message.role must be a string"),
        (message(contextId=3), "message.contextId must be a string"),
        (message(contextId="../etc"), "message.contextId may use only"),
        (message(parts={"text": "x"}), "message.parts must be an array"),
        (message(parts=["x"]), "message.parts[0] must be an object"),
        (message(parts=[]), "message.parts holds no text part"),
        (message(parts=[{"kind": "file", "file": {"uri": "file:///etc/passwd"}}]), "message.parts holds no text part"),
        (message(parts=[{"kind": "data", "data": {}}]), "message.parts holds no text part"),
        (message(parts=[{"data": {}}]), "message.parts holds no text part"),
        (message(parts=[{"kind": "video"}]), "message.parts[0].kind must be one of text, file, data"),
        (message(parts=[{"kind": 7, "text": "x"}]), "message.parts[0].kind must be one of"),
        (message(parts=[{"kind": "text"}]), "message.parts[0].text must be a string"),
        (message(parts=[{"kind": "text", "text": 5}]), "message.parts[0].text must be a string"),
        (message(parts=[{"text": None}]), "message.parts[0].text must be a string"),
        (message(parts=[{"text": "a"}, {"kind": "nope"}]), "message.parts[1].kind must be one of"),
    ],
)
def test_messages_with_no_work_or_wrong_types_are_invalid_params(params, why):
    with pytest.raises(rpc.RpcError) as info:
        rpc.parse_message(params, 9)
    assert info.value.code == rpc.INVALID_PARAMS and info.value.request_id == 9
    assert info.value.message.startswith(f"Invalid params: {why}")


def test_text_parts_are_joined_and_file_and_data_parts_ignored():
    parts = [{"text": "a"}, {"kind": "file", "file": {"uri": "x"}}, {"kind": "text", "text": ""}, {"kind": "data", "data": {}}]
    assert rpc.parse_message(message(parts=parts)).text == "a\n"


def test_dumps_writes_standard_json_only():
    text = rpc.dumps({"n": math.nan, "i": [math.inf, -math.inf, 1.5], "s": "a\ud800b\udfff", "o": object})
    doc = json.loads(text, parse_constant=lambda name: pytest.fail(f"emitted {name}"))
    assert doc["n"] is None and doc["i"] == [None, None, 1.5]
    assert doc["s"] == "a\ufffdb\ufffd"
    assert doc["o"].startswith("<class")
    text.encode("utf-8")  # no lone surrogate left
