"""A fleet-wide command that fails says so on stderr, with --json too (the report stays on stdout)."""

from __future__ import annotations

import json

import pytest
import typer

from mur.cli.fleet import many

RESULTS = [
    {"ok": True, "address": "hello@web-1", "deployment_id": "dep_1", "status": "stopped"},
    {"ok": False, "address": "hello@web-2", "deployment_id": "dep_2", "code": "E-DEPLOY-003",
     "error": "root@10.0.0.2: SSH connection refused\nsecond line"},
]


@pytest.mark.parametrize("json_out", [True, False])
def test_a_failed_target_is_named_with_its_error_code(capsys, json_out):
    with pytest.raises(typer.Exit) as done:
        many(RESULTS, json_out, "stop")
    assert done.value.exit_code == 1
    out, err = capsys.readouterr()
    line = "error[E-DEPLOY-003]: root@10.0.0.2: SSH connection refused"
    if json_out:
        assert [r["address"] for r in json.loads(out)] == ["hello@web-1", "hello@web-2"]
        assert err == f"hello@web-2: {line}\n"
    else:
        assert line in out and err == ""


def test_all_well_is_quiet_on_stderr(capsys):
    many(RESULTS[:1], True, "stop")
    assert capsys.readouterr().err == ""
