"""The one .env grammar: docs/run.md's golden table, rendering round trips, and sh reading the same values."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mur.errors import MurError
from mur.resolve.env import parse, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "run.md"


def golden_rows() -> list[tuple[str, str]]:
    """(line, expected) from the table under docs/run.md's 'The .env file'."""
    text = DOC.read_text().split("## The .env file", 1)[1]
    rows = []
    for row in text.splitlines():
        match = re.fullmatch(r"\| `(.*)` \| (.*) \|", row)
        if match:
            rows.append((match.group(1), match.group(2)))
    return rows


def test_the_table_is_there():
    assert len(golden_rows()) >= 15


@pytest.mark.parametrize(("line", "expected"), golden_rows())
def test_each_documented_line_parses_as_the_table_says(line, expected):
    if expected.startswith("`E-IO-003`"):
        with pytest.raises(MurError) as err:
            parse(line + "\n", "app/.env")
        assert err.value.code == "E-IO-003"
        assert err.value.message.startswith("app/.env:1: ")
        assert expected.split(": ", 1)[1] in err.value.message
    elif expected == "(no variable)":
        assert parse(line, ".env") == {}
    elif expected == "(empty)":
        assert parse(line, ".env") == {"A": ""}
    else:
        assert parse(line, ".env") == {"A": expected.strip("`")}


def test_the_error_names_the_line_number():
    with pytest.raises(MurError) as err:
        parse("A=1\n\n# c\nnot a line\n", "/x/.env")
    assert err.value.message == "/x/.env:4: expected KEY=VALUE, got 'not a line'"
    assert err.value.hint


def test_a_later_line_wins():
    assert parse("A=1\nA=2\n", ".env") == {"A": "2"}


values = st.text(st.characters(blacklist_characters="\n\r\0", blacklist_categories=("Cs",)), max_size=40)
envs = st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(envs)
def test_render_reads_back_unchanged(env):
    assert parse(render(env).decode(), "rendered") == env


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")
def test_sh_reads_a_rendered_file_to_the_same_values(tmp_path):
    env = {"PLAIN": "abc", "SPACES": "  a b  ", "QUOTES": "it's \"x\"", "DOLLAR": "$HOME ${X} `id`",
           "BACKSLASH": "a\\nb\\", "HASH": "a # b", "EMPTY": "", "UNICODE": "héllo ✓"}
    path = tmp_path / "env"
    path.write_bytes(render(env))
    script = ". ./env; " + "; ".join(f'printf "%s\\0" "${k}"' for k in env)
    out = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, check=True, env={}).stdout
    assert dict(zip(env, out.decode().split("\0")[:-1])) == env
    assert parse(path.read_text(), "env") == env


# Where sh reads a documented line differently, on purpose: dotenv's spaces around `=`, and no expansion.
SH_DIFFERS = {"A = abc ", "A=${HOME}"}


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")
@pytest.mark.parametrize(("line", "expected"), [r for r in golden_rows() if not r[1].startswith(("`E-", "("))])
def test_sh_agrees_with_the_documented_lines(tmp_path, line, expected):
    (tmp_path / "env").write_text(line + "\n")
    run = subprocess.run(["sh", "-c", '. ./env; printf "%s" "$A"'], cwd=tmp_path, capture_output=True,
                         env={"HOME": "/home/x", "PATH": "/usr/bin:/bin"})
    assert (run.stdout.decode() == expected.strip("`")) != (line in SH_DIFFERS)


TRICKY = """# the same file for every command
export PLAIN=abc # note
HASH=abc#note
SINGLE='a # b'
DOUBLE="a \\"b\\" \\$HOME"
SPACED = x y
"""


def test_run_deploy_and_the_rendered_service_file_see_the_same_values(tmp_path, monkeypatch):
    from mur.deploy.env import read_env_file, render_env_file
    from mur.resolve.env import resolve_env
    from mur.session.prechecks import load_env_file

    (tmp_path / ".env").write_text(TRICKY)
    (tmp_path / "murmur.yaml").write_text("")
    expected = {"PLAIN": "abc", "HASH": "abc#note", "SINGLE": "a # b", "DOUBLE": 'a "b" $HOME', "SPACED": "x y"}
    for key in expected:
        monkeypatch.delenv(key, raising=False)
    load_env_file(tmp_path / "murmur.yaml")  # mur run
    import os

    assert {k: os.environ[k] for k in expected} == expected
    deployed, origin = resolve_env([], None, tmp_path)  # mur deploy, image build, export k8s
    assert deployed == expected and origin.endswith(".env")
    assert read_env_file(render_env_file(deployed).decode()) == expected  # the supervisor on the target


def test_a_malformed_line_is_the_same_error_for_run_and_deploy(tmp_path, monkeypatch):
    from mur.resolve.env import resolve_env
    from mur.session.prechecks import load_env_file

    (tmp_path / ".env").write_text("GOOD=1\n1BAD=x\n")
    errors = []
    for call in (lambda: load_env_file(tmp_path / "murmur.yaml"), lambda: resolve_env([], None, tmp_path)):
        with pytest.raises(MurError) as err:
            call()
        errors.append((err.value.code, err.value.message))
    assert errors[0] == errors[1] == ("E-IO-003", f"{tmp_path}/.env:2: '1BAD' is not a valid environment variable name")
