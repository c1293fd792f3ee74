"""What a person reads: mur.humanize.plain, and the human forms of `mur probe` built with it."""

from __future__ import annotations

import json
import re

from mur.humanize import plain

PYTHON_VALUES = re.compile(r"\b(True|False|None)\b|\[\'|\'\]")


def test_plain_never_shows_a_python_repr():
    assert [plain(v) for v in (None, True, False, 0, 7, 0.5, 1e-7, "x", "")] == [
        "—", "yes", "no", "0", "7", "0.5", "1e-07", "x", ""]
    assert plain(["a", "b", None, True]) == "a, b, —, yes"
    assert plain([]) == "—"
    assert plain({"ok": True, "why": None}) == "ok yes  why —"


def test_probe_human_output_has_no_python_values(cli):
    code, out, err = cli("probe")
    assert code == 0, err
    assert not PYTHON_VALUES.search(out), out
    code, raw, _ = cli("probe", "--json")
    report = json.loads(raw)
    shown = dict(line.split(None, 1) for line in out.splitlines())
    for key, value in report.items():  # every field, in its person's form
        assert shown[key] == plain(value), key


def test_host_prepare_summary_shows_no_python_values_when_the_preflight_could_not_tell():
    from mur.cli.host import _human

    result = {"check": False, "changed": False, "applied": [], "rebooted": False, "host": "h", "deploy_user": "mur",
              "preflight": {"ok": False, "landlock_abi": None}, "deploy_command": "mur deploy ..."}
    text = _human(result)
    assert "Landlock ABI —, cgroup —, init —" in text and not PYTHON_VALUES.search(text), text
