"""Shell completion: `mur --show-completion` / `--install-completion` (typer's), driven by a real bash.

Completing runs on every Tab press, so it must stay as light as `mur --help`: no heavy import."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli_edge import HEAVY

BIN = Path(sys.executable).parent


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home), "LANG": "C.UTF-8",
            "SHELL": "/bin/bash", **extra}


def _bash_complete(home: Path, line: str) -> list[str]:
    """What bash offers for `line` + Tab, through the script `mur --show-completion` prints."""
    script = subprocess.run([BIN / "mur", "--show-completion"], env=_env(home), capture_output=True, text=True,
                            timeout=60, check=True).stdout
    words = line.split(" ")
    probe = (f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
             '_mur_completion mur; printf "%s\\n" "${COMPREPLY[@]}"\n')
    run = subprocess.run(["bash", "-c", probe], env=_env(home), capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return [w for w in run.stdout.splitlines() if w]


pytestmark = pytest.mark.skipif(not (BIN / "mur").exists() or shutil.which("bash") is None,
                                reason="needs the installed mur entry point and bash")


def test_bash_completes_commands_subcommands_and_values(tmp_path):
    assert {"run", "build", "trace", "schema", "config"} <= set(_bash_complete(tmp_path, "mur "))
    assert _bash_complete(tmp_path, "mur tr") == ["trace"]
    assert set(_bash_complete(tmp_path, "mur trace s")) == {"show", "steps"}
    assert set(_bash_complete(tmp_path, "mur schema ")) == {"capsule", "artifact", "fleet"}
    assert "--manifest" in _bash_complete(tmp_path, "mur run --")


def test_install_completion_writes_a_sourced_script(tmp_path):
    run = subprocess.run([BIN / "mur", "--install-completion"], env=_env(tmp_path), capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    script = tmp_path / ".bash_completions" / "mur.sh"
    assert "_MUR_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()


def test_completing_imports_nothing_heavy(tmp_path):
    probe = (
        "import json, sys\n"
        "from mur.cli.main import main\n"
        "try:\n"
        "    main([])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} + ('yaml',) if m in sys.modules)), file=sys.stderr)\n"
    )
    env = _env(tmp_path, _MUR_COMPLETE="complete_bash", COMP_WORDS="mur run --", COMP_CWORD="2")
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert "--manifest" in run.stdout
    assert json.loads(run.stderr.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("login, script", [(None, "complete_bash"), ("/usr/bin/zsh", "complete_zsh"),
                                           ("/bin/dash", "complete_bash")])
def test_show_completion_without_a_shell_in_the_process_tree(cli, monkeypatch, login, script):
    """Under a container's init, cron or CI no ancestor is a shell: $SHELL decides, else bash."""
    import shellingham
    from typer import _completion_shared as shared
    from typer import completion

    # main() wraps typer's detection for the run; restore it afterwards
    monkeypatch.setattr(shared, "_get_shell_name", shared._get_shell_name)
    monkeypatch.setattr(completion, "_get_shell_name", completion._get_shell_name)

    def nothing(*_a, **_k):
        raise shellingham.ShellDetectionFailure()

    monkeypatch.setattr(shellingham, "detect_shell", nothing)
    if login is None:
        monkeypatch.delenv("SHELL", raising=False)
    else:
        monkeypatch.setenv("SHELL", login)
    code, out, err = cli("--show-completion")
    assert (code, err) == (0, "")
    assert f"_MUR_COMPLETE={script}" in out
