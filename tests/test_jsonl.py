"""mur.jsonl, the one JSON-lines reader: line numbers, what a line is, the size cap, links refused."""

from __future__ import annotations

import json
import os

import pytest

from mur.fsafe import LinkRefused
from mur.jsonl import BadLine, TooLarge, read_records


def test_records_keep_their_line_numbers_across_blank_lines_and_crlf(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\r\n\n   \n[2]\n"x"')
    assert read_records(path) == [(1, {"a": 1}), (4, [2]), (5, "x")]


def test_a_line_separator_inside_a_string_does_not_split_the_record(tmp_path):
    """json.dumps(ensure_ascii=False) writes U+2028/U+0085 raw; str.splitlines would cut there."""
    path = tmp_path / "a.jsonl"
    records = [{"t": "one\u2028two\x85three\x0cfour"}, {"t": "next"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert read_records(path) == [(1, records[0]), (2, records[1])]


def test_a_bad_line_names_path_and_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"ok": 1}\n{broken\n')
    with pytest.raises(BadLine) as info:
        read_records(path)
    assert (info.value.number, str(info.value)) == (2, f"{path}:2: not valid JSON: Expecting property name "
                                                      "enclosed in double quotes")
    path.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(BadLine) as info:
        read_records(path)
    assert info.value.number == 1


def test_the_size_cap(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"pad": "' + "x" * 100 + '"}\n')
    assert len(read_records(path, limit=200)) == 1
    with pytest.raises(TooLarge) as info:
        read_records(path, limit=50)
    assert isinstance(info.value, OSError) and "larger than 50 bytes" in str(info.value)


def test_bad_utf8_is_replaced_or_refused(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"t": "\xff"}\n')
    assert read_records(path) == [(1, {"t": "\ufffd"})]
    with pytest.raises(UnicodeDecodeError):
        read_records(path, strict_utf8=True)


def test_a_tool_writable_file_that_is_a_link_is_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text('{"secret": "outside"}\n')
    work = tmp_path / "work"
    work.mkdir()
    (work / "sym.jsonl").symlink_to(secret)
    os.link(secret, work / "hard.jsonl")
    for name in ("sym.jsonl", "hard.jsonl"):
        assert read_records(work / name) == [(1, {"secret": "outside"})]  # the control: a path the user named
        with pytest.raises(LinkRefused):
            read_records(work / name, tool_writable=True)
    (work / "plain.jsonl").write_text('{"ok": true}\n')
    assert read_records(work / "plain.jsonl", tool_writable=True) == [(1, {"ok": True})]
