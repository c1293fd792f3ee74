"""mur.cli.runfast parses `mur run` without typer: for every well-formed invocation it must build the
RunOptions typer builds, and leave everything else (help, errors, odd forms) to typer."""

from __future__ import annotations

from pathlib import Path

import pytest

from mur.cli import runexec, runfast


def typer_options(args: list[str], monkeypatch) -> object:
    """The RunOptions typer's `mur run` hands to runexec.execute for `args`."""
    import typer

    from mur.cli import run as run_module
    from mur.cli.main import build_app

    seen = []
    monkeypatch.setattr(runexec, "execute", seen.append)
    command = typer.main.get_command(build_app(lazy=False))
    command.main(args=["run", *args], prog_name="mur", standalone_mode=False, obj={})
    assert run_module.run  # the typer declaration is what the fast parser mirrors
    (opts,) = seen
    return opts


WELL_FORMED = [
    [],
    ["-m", "caps/x.yaml", "-t", "Ada"],
    ["--manifest=caps", "--task=two words"],
    ["-mcaps", "-tAda"],
    ["-m=caps"],
    ["--task", "--json"],  # a value that looks like an option is still the value
    ["-t", "first", "-t", "second"],  # the last one wins
    ["--json", "-v", "--no-env-file", "--explain-scope"],
    ["--verbose", "--port", "8080", "--bind", "0.0.0.0", "--workdir", "w"],
    ["--port", "08080"],
    ["--containment", "sealed", "--system-prompt", "be brief"],
    ["--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep"],
    ["--a2a-token-file", "tok", "--tls-cert", "c.pem", "--tls-key", "k.pem"],
    ["--task", ""],
]


@pytest.mark.parametrize("args", WELL_FORMED, ids=lambda a: " ".join(a) or "(none)")
def test_a_well_formed_run_parses_as_typer_parses_it(args, monkeypatch):
    for var in runfast.ENVVARS.values():
        monkeypatch.delenv(var, raising=False)
    fields = runfast.parse(args)
    assert fields is not None
    from mur.session.options import RunOptions

    assert RunOptions(**fields) == typer_options(args, monkeypatch)


def test_option_values_from_the_environment_as_typer_reads_them(monkeypatch):
    from mur.session.options import RunOptions

    monkeypatch.setenv("MURMUR_A2A_TOKEN_FILE", "/run/token")
    monkeypatch.setenv("MURMUR_A2A_TLS_CERT", "")  # empty: unset, for click too
    for args in ([], ["--a2a-token-file", "given"]):
        assert RunOptions(**runfast.parse(args)) == typer_options(args, monkeypatch)
    monkeypatch.setenv("MURMUR_A2A_TLS_CERT", "c.pem")  # a certificate without a key: typer's error
    assert runfast.parse([]) is None


LEFT_TO_TYPER = [
    ["--help"], ["-t", "x", "--help"], ["--bogus"], ["stray"], ["--"], ["-t"], ["-vt", "x"], ["-h"],
    ["--port", "0"], ["--port", "70000"], ["--port", "eighty"], ["--port", "-1"], ["--containment", "loose"],
    ["--lifecycle-task-acceptance", "all"], ["--lifecycle-after-task", "stay"], ["--tls-cert", "c.pem"],
    ["--json=yes"],
]


@pytest.mark.parametrize("args", LEFT_TO_TYPER, ids=" ".join)
def test_anything_else_is_left_to_typer(args, monkeypatch):
    for var in runfast.ENVVARS.values():
        monkeypatch.delenv(var, raising=False)
    assert runfast.parse(args) is None


def test_every_option_typer_declares_is_known_here():
    import typer

    from mur.cli.main import build_app

    command = typer.main.get_command(build_app(lazy=False)).commands["run"]
    declared = {}
    for param in command.params:
        if param.param_type_name == "argument":  # `mur run CAPSULE`: a positional is left to typer
            continue
        for name in param.opts:
            declared[name] = (param.is_flag, param.envvar)
    known = {name: (False, runfast.ENVVARS.get(field)) for name, (field, _) in runfast.VALUED.items()}
    known.update({name: (True, None) for name in runfast.FLAGS})
    assert {k: v for k, v in declared.items() if k != "--help"} == known


def test_completion_requests_go_to_typer(monkeypatch):
    monkeypatch.setenv("_MUR_COMPLETE", "complete_bash")
    assert runfast.run_fast(["-t", "x"]) is False


def test_paths_are_plain_paths(monkeypatch):
    assert runfast.parse(["-m", "a/b"])["manifest"] == Path("a/b")


def test_a_capsule_given_as_an_argument_is_the_manifest_and_only_once(monkeypatch, tmp_path):
    """`mur run DIR -t Ada`, as `mur build DIR`: the fast parser leaves it to typer, which reads it as
    -m DIR (DIR/murmur.yaml); given both ways it is a usage error naming both."""
    import typer

    (tmp_path / "cap").mkdir()
    assert runfast.parse([str(tmp_path / "cap"), "-t", "Ada"]) is None
    opts = typer_options([str(tmp_path / "cap"), "-t", "Ada"], monkeypatch)
    assert opts.manifest == tmp_path / "cap" / "murmur.yaml" and opts.task == "Ada"
    assert typer_options(["x.yaml"], monkeypatch).manifest == Path("x.yaml")
    with pytest.raises(typer.BadParameter) as info:
        typer_options([str(tmp_path / "cap"), "-m", "other.yaml"], monkeypatch)
    assert "give the capsule once" in str(info.value)
