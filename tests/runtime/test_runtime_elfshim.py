"""mur's objdump/objcopy stand-ins for PyInstaller: the runtime bundle builds without binutils."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mur.runtime import bundle as B
from mur.runtime.elfshim import ElfError, add_section, file_format, main, section, shim_dir

# A dynamically linked executable present on every Debian (coreutils): something real to change.
TRUE = shutil.which("true") or "/bin/true"
PYTHON_ELF = os.path.realpath(sys.executable)


def test_objdump_a_accepts_elf_files_and_refuses_the_rest(tmp_path, capsys):
    assert main(["objdump", "-a", PYTHON_ELF]) == 0
    assert f"{PYTHON_ELF}:     file format elf64-x86-64" in capsys.readouterr().out
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert main(["objdump", "-a", str(text)]) == 1
    # ELF magic, but its section header table lies past the end of the file: not a valid ELF
    cut = tmp_path / "cut.so"
    cut.write_bytes(Path(TRUE).read_bytes()[:4096])
    assert main(["objdump", "-a", str(cut)]) == 1
    assert "outside the file" in capsys.readouterr().err


def test_added_section_is_found_by_name_and_the_program_still_runs(tmp_path):
    exe = tmp_path / "true"
    shutil.copy(TRUE, exe)
    exe.chmod(0o751)
    payload = os.urandom(100_003) + b"MEI\014\013\012\013\016"
    pkg = tmp_path / "pkg"
    pkg.write_bytes(payload)
    assert main(["objcopy", "--add-section", f"pydata={pkg}", str(exe)]) == 0
    assert section(str(exe), "pydata") == payload
    assert section(str(exe), ".text") is not None and section(str(exe), "nothere") is None
    assert exe.stat().st_mode & 0o777 == 0o751
    assert subprocess.run([str(exe)]).returncode == 0  # nothing that is loaded moved
    assert file_format(str(exe)) == "elf64-x86-64"
    with pytest.raises(ElfError, match="already has a section"):
        add_section(str(exe), "pydata", b"again")
    if shutil.which("readelf"):  # binutils, where present, reads the same section
        listing = subprocess.run(["readelf", "-S", "-W", str(exe)], capture_output=True, text=True).stdout
        line = next(li for li in listing.splitlines() if " pydata " in li)
        assert f"{len(payload):06x}" in line.split()


def test_a_32_bit_big_endian_header_is_extended_too(tmp_path):
    """A minimal ELF32 MSB file with a null section and a name table: the layout code is class-generic."""
    names = b"\0.shstrtab\0"
    ehdr_size, shdr_size = 52, 40
    strtab_at = ehdr_size
    table_at = strtab_at + len(names) + (-(strtab_at + len(names)) % 4)
    ident = b"\x7fELF\x01\x02\x01" + b"\0" * 9
    ehdr = ident + struct.pack(">HHIIIIIHHHHHH", 2, 20, 1, 0, 0, table_at, 0, ehdr_size, 32, 0, shdr_size, 2, 1)
    null = struct.pack(">IIIIIIIIII", *[0] * 10)
    strsec = struct.pack(">IIIIIIIIII", 1, 3, 0, 0, strtab_at, len(names), 0, 0, 1, 0)
    blob = ehdr + names + b"\0" * (table_at - strtab_at - len(names)) + null + strsec
    path = tmp_path / "be32"
    path.write_bytes(blob)
    add_section(str(path), "pydata", b"payload")
    assert section(str(path), "pydata") == b"payload"
    assert section(str(path), ".shstrtab").startswith(names)
    assert file_format(str(path)) == "elf32-big"


def test_other_invocations_are_refused_loudly(capsys):
    assert main(["objdump", "-d", PYTHON_ELF]) == 2
    assert main(["strip", PYTHON_ELF]) == 2
    assert "does not support" in capsys.readouterr().err


def test_the_build_path_finds_the_stand_ins_first(tmp_path):
    env = B.build_env(tmp_path / "shim")
    for tool in ("objdump", "objcopy"):
        assert shutil.which(tool, path=env["PATH"]) == str(tmp_path / "shim" / tool)
    # the scripts work as commands, from anywhere (the build runs in a temporary cwd)
    run = subprocess.run([str(tmp_path / "shim" / "objdump"), "-a", PYTHON_ELF], capture_output=True, text=True,
                         cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and "file format elf64" in run.stdout, run.stderr


def test_shim_dir_is_idempotent(tmp_path):
    first = (shim_dir(tmp_path) / "objcopy").read_text()
    assert (shim_dir(tmp_path) / "objcopy").read_text() == first
    assert "-m mur.runtime.elfshim objcopy" in first


def test_a_python_without_its_shared_library_is_named_before_pyinstaller_runs(tmp_path, monkeypatch):
    """Debian's python3 ships libpython3.X apart; PyInstaller needs it in the bundle."""
    import sysconfig

    from mur.errors import MurError

    real = sysconfig.get_config_var
    assert B.missing_libpython() is None  # this interpreter's is installed
    monkeypatch.setattr(sysconfig, "get_config_var", lambda key: {
        "INSTSONAME": "libpython3.99.so.1.0", "Py_ENABLE_SHARED": 1, "LIBDIR": str(tmp_path)}.get(key, real(key)))
    assert B.missing_libpython() == "libpython3.99.so.1.0"
    with pytest.raises(MurError) as err:
        B.build_bundle(tmp_path / "out")
    assert err.value.code == "E-DEPLOY-006" and "libpython3.99.so.1.0 is not installed" in err.value.message
    assert err.value.hint.startswith("apt-get install libpython3.99 ")
    assert not (tmp_path / "out").exists()
