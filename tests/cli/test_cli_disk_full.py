"""The one translation of a full disk (mur.fsutil): ENOSPC and EDQUOT become E-IO-003 naming the path.
The real thing (a full tmpfs under build, publish, install, config set) is integration/cli/test_disk_full.py."""

from __future__ import annotations

import errno

import pytest

from mur.errors import MurError
from mur.fsutil import writing


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on device"),
                                          (errno.EDQUOT, "disk quota exceeded")])
def test_writing_names_the_path(code, words):
    with pytest.raises(MurError) as err:
        with writing("/data/out.mur.zip"):
            raise OSError(code, "whatever the kernel said")
    assert (err.value.code, err.value.message) == ("E-IO-003", f"{words} writing /data/out.mur.zip")
    assert "mur gc" in err.value.hint


def test_other_os_errors_pass_through():
    with pytest.raises(PermissionError):
        with writing("/data/x"):
            raise PermissionError(errno.EACCES, "denied")


def test_an_unwrapped_full_disk_is_not_e_internal(monkeypatch, capsys):
    """A write no adapter wrapped still ends as E-IO-003 (with the path the OSError carries), exit 1."""
    import typer

    import mur.cli.main as cli

    def full_disk(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device", "/var/tmp/x")

    monkeypatch.setattr(typer.main, "get_command", full_disk)
    with pytest.raises(SystemExit) as exc:
        cli.main(["probe", "--help"])  # through typer (`mur --help` alone is printed without it)
    assert exc.value.code == 1
    assert capsys.readouterr().err.startswith("error[E-IO-003]: no space left on device writing /var/tmp/x\n")
