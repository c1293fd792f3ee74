"""The hostile harness itself: scripted tool calls through a real `mur run`, as root and as a non-root
uid, come back as the model saw them. Also the baseline every escape test relies on: what a
legitimate tool does (bash and python3 scripts, coreutils, pipes, subshells, files it writes) works."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

LEGITIMATE = [
    "echo hello > notes.txt && cat notes.txt | tr a-z A-Z",
    "mkdir -p out/deep && (cd out/deep && echo nested > f.txt) && cat out/deep/f.txt",
    "python3 -c 'import json, pathlib; pathlib.Path(\"out/data.json\").write_text(json.dumps({\"n\": 6 * 7}))'"
    " && cat out/data.json",
    "ls | sort | head -n 50 > listing.txt; echo $(wc -l < listing.txt) >/dev/null; echo ok-$((2+3))",
]


def _assert_legitimate(run) -> None:
    assert run.returncode == 0, run.describe()
    first, second, third, fourth = run.results[:4]
    assert first.ok and first.data == "HELLO\n", run.describe()
    assert second.ok and second.data == "nested\n", run.describe()
    assert third.ok and third.data == '{"n": 42}', run.describe()
    assert fourth.ok and fourth.data == "ok-5\n", run.describe()
    assert (run.accessible / "out" / "data.json").read_text() == '{"n": 42}'
    assert run.result_text == "hostile script finished"
    assert [e["exit_code"] for e in run.events("shell")] == [0] * len(run.results)


def test_legitimate_tools_work_as_root(hostile):
    _assert_legitimate(hostile().run(LEGITIMATE))


def test_legitimate_tools_work_as_a_non_root_user(hostile, unprivileged_user):
    run = hostile(user=unprivileged_user).run(LEGITIMATE + ["ls -n notes.txt"])
    _assert_legitimate(run)
    assert f" {unprivileged_user.uid} " in run.results[4].data  # the tool ran as that uid
