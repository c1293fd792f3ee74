"""A full disk is `error[E-IO-003]: no space left on device writing PATH`, never E-INTERNAL, and leaves
no temp file behind. Each case runs in a private mount namespace (`unshare -m`) on a 1 MiB tmpfs that
the namespace's end removes, so nothing is mounted on the host even if the test dies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.requires_root]

HINT = ("  hint: free space on that filesystem (df -h shows it; `mur gc` lists old sessions and compiled "
        "components to remove), then run the command again\n")


@pytest.fixture(scope="module")
def payload_zip(tmp_path_factory) -> Path:
    """A 2 MiB incompressible .mur.zip, too big for the 1 MiB filesystem."""
    src = tmp_path_factory.mktemp("src") / "big"
    src.mkdir()
    (src / "murmur.yaml").write_text('name: big\nversion: "0.1.0"\nruntime: tool\nrequires_files: [big.wasm]\n')
    (src / "big.wasm").write_bytes(b"\0asm\1\0\0\0" + os.urandom(2 << 20))
    subprocess.run([sys.executable, "-m", "mur", "build", str(src)], check=True, capture_output=True)
    return src / "big-0.1.0.mur.zip"


def on_full_fs(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    """Run `script` (bash) with $FULL a fresh 1 MiB tmpfs, $MUR the CLI; then list what $FULL holds."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    full = tmp_path / "full"
    full.mkdir()
    wrapper = (
        'mount -t tmpfs -o size=1m tmpfs "$FULL" || exit 99\n'
        f"{script}\n"
        'echo "rc=$?" >&2; find "$FULL" -name "*.tmp" -printf "left:%P\\n"\n'
    )
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "FULL": str(full), "HOME": str(full / "home"),
           "MUR": f"{sys.executable} -m mur", "MUR_NO_PROGRESS": "1"}
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", wrapper],
                          env=env, capture_output=True, text=True, timeout=120)
    if "rc=" not in proc.stderr and proc.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    return proc


def outcome(proc: subprocess.CompletedProcess) -> tuple[str, str]:
    """(stderr of the mur command, files left on the tmpfs)."""
    err, _, rc = proc.stderr.rpartition("rc=")
    assert rc.strip() == "1", proc.stderr
    assert "Traceback" not in err and "E-INTERNAL" not in err
    return err, proc.stdout


def test_build_into_a_full_directory(tmp_path, payload_zip):
    src = payload_zip.parent
    err, left = outcome(on_full_fs(tmp_path, f'cd "{tmp_path}" && $MUR build "{src}" -o "$FULL/"'))
    assert err == f"error[E-IO-003]: no space left on device writing {tmp_path}/full/big-0.1.0.mur.zip\n" + HINT
    assert left == ""


def test_publish_into_a_full_home(tmp_path, payload_zip):
    proc = on_full_fs(tmp_path, f'mkdir -p "$HOME" && $MUR publish "{payload_zip}"; rc=$?; '
                                'find "$HOME" -mindepth 1 -printf "home:%P\\n"; (exit $rc)')
    err, left = outcome(proc)
    store = tmp_path / "full/home/.murmur/artifacts/big/0.1.0"
    assert err == f"error[E-IO-003]: no space left on device writing {store}/big-0.1.0.mur.zip\n" + HINT
    assert left == ""  # neither temp files nor the empty store directories it made


def test_install_into_a_full_project(tmp_path, payload_zip):
    script = ('mkdir -p "$FULL/proj" "$HOME" && printf "name: p\\nversion: \\"1\\"\\n" > "$FULL/proj/murmur.yaml" '
              f'&& cd "$FULL/proj" && $MUR install "{payload_zip}"; rc=$?; ls -A "$FULL/proj"; (exit $rc)')
    err, left = outcome(on_full_fs(tmp_path, script))
    store = tmp_path / "full/proj/.murmur/artifacts/big/0.1.0"
    assert err == f"error[E-IO-003]: no space left on device writing {store}/big-0.1.0.mur.zip\n" + HINT
    assert left == "murmur.yaml\n"


def test_config_set_on_a_full_filesystem(tmp_path):
    script = ('mkdir -p "$FULL/proj" "$HOME" && head -c 2M /dev/zero > "$FULL/fill" 2>/dev/null; '
              'cd "$FULL/proj" && $MUR config set registry.index_url http://127.0.0.1:1/index.json')
    err, left = outcome(on_full_fs(tmp_path, script))
    assert err == f"error[E-IO-003]: no space left on device writing {tmp_path}/full/proj/.murmur/config.yaml\n" + HINT
    assert left == ""
