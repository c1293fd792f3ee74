"""Stand-ins for the two binutils commands PyInstaller runs on Linux, so the runtime bundle builds on
a machine without binutils (a fresh Debian 12 has none; PyInstaller refuses to start without
`objdump` on PATH).

PyInstaller (6.x, PyInstaller/depend/bindepend.py and building/api.py) calls exactly:

  objdump -a FILE                          "is this a valid ELF?" (only the exit status is read)
  objcopy --add-section pydata=PKG EXE     put the archive into a named section of the bootloader

Both are done here in Python: the first parses the ELF header and checks that its tables lie inside
the file; the second appends the section's bytes, a copy of the section-name table with the new
name, and a new section header table, and points the ELF header at them (the old tables stay as
dead bytes; nothing that is loaded moves, and the bootloader finds its archive by section name).
Anything else is refused loudly (exit 2), so a PyInstaller that starts asking for more fails the
build instead of misbehaving. `shim_dir()` writes the two commands for one build's PATH.
"""

from __future__ import annotations

import os
import shlex
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

SHT_PROGBITS = 1
SHN_LORESERVE, SHN_XINDEX = 0xFF00, 0xFFFF
_ARCH = {62: "x86-64", 183: "littleaarch64", 3: "i386", 40: "littlearm", 243: "littleriscv"}


class ElfError(ValueError):
    """The file is not an ELF file this module can read or change."""


@dataclass
class _Elf:
    data: bytearray
    is64: bool
    end: str  # struct byte order
    shoff: int
    shentsize: int
    shnum: int
    shstrndx: int
    machine: int

    @property
    def shdr_fmt(self) -> str:
        return self.end + ("IIQQQQIIQQ" if self.is64 else "IIIIIIIIII")

    def section(self, index: int) -> list[int]:
        return list(struct.unpack_from(self.shdr_fmt, self.data, self.shoff + index * self.shentsize))


def _parse(data: bytes | bytearray, size: int | None = None) -> _Elf:
    """The ELF header of `data` (the whole file, or its first 64 bytes and the file's `size`)."""
    size = len(data) if size is None else size
    if len(data) < 52 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2) or data[6] != 1:
        raise ElfError("not an ELF file")
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64 and len(data) < 64:
        raise ElfError("truncated ELF header")
    machine = struct.unpack_from(end + "H", data, 18)[0]
    if is64:
        phoff, shoff = struct.unpack_from(end + "QQ", data, 32)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(end + "HHHHH", data, 54)
    else:
        phoff, shoff = struct.unpack_from(end + "II", data, 28)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(end + "HHHHH", data, 42)
    if phnum and phoff + phentsize * phnum > size:
        raise ElfError("program headers outside the file")
    if shoff and shoff + shentsize * shnum > size:
        raise ElfError("section headers outside the file")
    return _Elf(bytearray(data), is64, end, shoff, shentsize, shnum, shstrndx, machine)


def file_format(path: str) -> str:
    """objdump's name of the file's format (`elf64-x86-64`); ElfError when it is no valid ELF."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        size = os.fstat(fh.fileno()).st_size
    elf = _parse(head, size)
    arch = _ARCH.get(elf.machine, "little" if elf.end == "<" else "big")
    return f"elf{64 if elf.is64 else 32}-{arch}"


def add_section(path: str, name: str, payload: bytes) -> None:
    """Add a non-loaded PROGBITS section `name` holding `payload` to the ELF file at `path` (atomic)."""
    with open(path, "rb") as fh:
        elf = _parse(fh.read())
    if not elf.shoff or elf.shnum == 0 or elf.shnum >= SHN_LORESERVE or elf.shstrndx in (0, SHN_XINDEX) \
            or elf.shstrndx >= elf.shnum:
        raise ElfError("no ordinary section header table to extend")
    if elf.shentsize != struct.calcsize(elf.shdr_fmt):
        raise ElfError(f"unexpected section header size {elf.shentsize}")
    headers = [elf.section(i) for i in range(elf.shnum)]
    strtab = headers[elf.shstrndx]
    names = bytes(elf.data[strtab[4] : strtab[4] + strtab[5]])
    if len(names) != strtab[5]:
        raise ElfError("section name table outside the file")
    wanted = name.encode()
    if b"\0" + wanted + b"\0" in b"\0" + names:
        raise ElfError(f"the file already has a section named {name}")
    if not names.endswith(b"\0"):
        names += b"\0"
    out = elf.data

    def align(n: int) -> None:
        out.extend(b"\0" * (-len(out) % n))

    align(16)
    payload_at = len(out)
    out += payload
    names_at = len(out)
    out += names + wanted + b"\0"
    strtab[4], strtab[5] = names_at, len(names) + len(wanted) + 1
    align(8 if elf.is64 else 4)
    table_at = len(out)
    headers.append([len(names), SHT_PROGBITS, 0, 0, payload_at, len(payload), 0, 0, 1, 0])
    for h in headers:
        out += struct.pack(elf.shdr_fmt, *h)
    if elf.is64:
        struct.pack_into(elf.end + "Q", out, 40, table_at)
        struct.pack_into(elf.end + "H", out, 60, len(headers))
    else:
        struct.pack_into(elf.end + "I", out, 32, table_at)
        struct.pack_into(elf.end + "H", out, 48, len(headers))
    mode = os.stat(path).st_mode & 0o7777
    tmp = f"{path}.elfshim.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(out)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def section(path: str, name: str) -> bytes | None:
    """The bytes of the section `name` (what the bootloader reads back), or None."""
    with open(path, "rb") as fh:
        elf = _parse(fh.read())
    if not elf.shoff or elf.shstrndx >= elf.shnum:
        return None
    strtab = elf.section(elf.shstrndx)
    names = bytes(elf.data[strtab[4] : strtab[4] + strtab[5]])
    for i in range(elf.shnum):
        h = elf.section(i)
        if names[h[0] : names.find(b"\0", h[0])] == name.encode():
            return bytes(elf.data[h[4] : h[4] + h[5]])
    return None


# --- the two commands ----------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """`objdump -a FILE...` or `objcopy --add-section NAME=FILE EXE`, as PyInstaller calls them."""
    tool, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if tool == "objdump" and len(args) >= 2 and args[0] == "-a":
            for path in args[1:]:
                sys.stdout.write(f"\n{path}:     file format {file_format(path)}\n\n")
            return 0
        if tool == "objcopy" and len(args) == 3 and args[0] == "--add-section" and "=" in args[1]:
            name, _, source = args[1].partition("=")
            with open(source, "rb") as fh:
                add_section(args[2], name, fh.read())
            return 0
    except (OSError, ElfError, struct.error) as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 1
    print(f"{tool or 'elfshim'}: mur's binutils stand-in does not support: {shlex.join(argv)}", file=sys.stderr)
    return 2


def shim_dir(where: Path) -> Path:
    """Write `objdump` and `objcopy` into `where` (a directory to put first on a build's PATH)."""
    import mur

    where.mkdir(parents=True, exist_ok=True)
    src_parent = str(Path(mur.__file__).resolve().parent.parent)
    for tool in ("objdump", "objcopy"):
        script = where / tool
        # -S: no site-packages needed, so each call (one per collected ELF file) starts in ~15 ms.
        script.write_text(
            "#!/bin/sh\n"
            f"# mur's stand-in for binutils' {tool} during a PyInstaller build (mur/runtime/elfshim.py)\n"
            f"PYTHONPATH={shlex.quote(src_parent)} exec {shlex.quote(sys.executable)} -S "
            f"-m mur.runtime.elfshim {tool} \"$@\"\n"
        )
        script.chmod(0o755)
    return where


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
