"""What an allow-listed binary needs to start: its ELF interpreter and its DT_NEEDED closure.

Landlock then grants read+execute on exactly these files (no whole directories). We parse ELF
ourselves with ``struct`` instead of running ``ldd``: ldd executes the target's loader on it (it is
code execution on an untrusted file, and prints nothing useful for a foreign-arch binary), and
our resolution must follow the same search order the loader will use *inside* the sandbox:

  1. DT_RPATH of the object (only when it has no DT_RUNPATH), then the executable's DT_RPATH;
  2. DT_RUNPATH of the object (for its own direct needs only);
  3. the directories of /etc/ld.so.conf (what /etc/ld.so.cache indexes), including ``include`` globs;
  4. the loader's built-in defaults: /lib/<triplet>, /usr/lib/<triplet>, /lib, /usr/lib (+ lib64).

``$ORIGIN`` is expanded; LD_LIBRARY_PATH is ignored (the loader ignores it for nothing, but we do not
pass a host LD_LIBRARY_PATH unless baseline_env asks for it, and then the dirs are not granted).
A candidate counts only when it is an ELF of the same class and machine (a 32-bit libc in /usr/lib
is skipped, as the loader skips it). glibc-hwcaps variants of a found library are granted too, since
the loader may prefer them. A ``#!`` script's interpreter (and, for ``#!/usr/bin/env NAME``, NAME on
PATH) is resolved the same way, because the kernel needs execute on it to run the script.
"""

from __future__ import annotations

import glob
import os
import shutil
import struct
from dataclasses import dataclass

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 15, 29

_TRIPLETS = {
    62: "x86_64-linux-gnu", 183: "aarch64-linux-gnu", 3: "i386-linux-gnu", 40: "arm-linux-gnueabihf",
    243: "riscv64-linux-gnu", 21: "powerpc64le-linux-gnu", 22: "s390x-linux-gnu",
}


@dataclass(frozen=True)
class ElfInfo:
    elf_class: int  # 1 = 32-bit, 2 = 64-bit
    machine: int
    interp: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


def read_elf(path: str) -> ElfInfo | None:
    """Parse the program headers and dynamic section; None when ``path`` is not an ELF file.

    Reads only the header, the program headers, the dynamic segment and the string table (a few KiB
    even for libcrypto), by seeking.
    """
    try:
        with open(path, "rb") as fh:
            return _parse(fh)
    except (OSError, struct.error, ValueError):
        return None


def _parse(fh) -> ElfInfo | None:
    def read_at(offset: int, size: int) -> bytes:
        fh.seek(offset)
        data = fh.read(size)
        if len(data) != size:
            raise ValueError("truncated ELF")
        return data

    head = fh.read(64)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    is64, end = head[4] == 2, "<" if head[5] == 1 else ">"
    machine = struct.unpack_from(end + "H", head, 18)[0]
    if is64:
        phoff, = struct.unpack_from(end + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
    else:
        phoff, = struct.unpack_from(end + "I", head, 28)
        phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
    if phnum > 512 or phentsize < (56 if is64 else 32):
        return None
    table = read_at(phoff, phentsize * phnum)
    loads, interp, dynamic = [], None, None
    for i in range(phnum):
        off = i * phentsize
        if is64:
            p_type, _flags, p_offset, p_vaddr, _pa, p_filesz = struct.unpack_from(end + "IIQQQQ", table, off)
        else:
            p_type, p_offset, p_vaddr, _pa, p_filesz = struct.unpack_from(end + "IIIII", table, off)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_INTERP and p_filesz < 4096:
            interp = read_at(p_offset, p_filesz).split(b"\0", 1)[0].decode(errors="replace")
        elif p_type == PT_DYNAMIC and p_filesz < (1 << 20):
            dynamic = (p_offset, p_filesz)
    needed_off, rpath_off, runpath_off = [], [], []
    strtab = strsz = None
    if dynamic:
        fmt, size = (end + "qQ", 16) if is64 else (end + "iI", 8)
        raw = read_at(dynamic[0], dynamic[1] - dynamic[1] % size)
        for tag, val in struct.iter_unpack(fmt, raw):
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                needed_off.append(val)
            elif tag == DT_STRTAB:
                strtab = val
            elif tag == DT_STRSZ:
                strsz = val
            elif tag == DT_RPATH:
                rpath_off.append(val)
            elif tag == DT_RUNPATH:
                runpath_off.append(val)
    strings = b""
    if strtab is not None and strsz and strsz < (16 << 20) and (needed_off or rpath_off or runpath_off):
        base = next((strtab - v + o for v, o, n in loads if v <= strtab < v + n), None)
        if base is not None:
            strings = read_at(base, strsz)

    def string(rel: int) -> str:
        if rel >= len(strings):
            return ""
        nul = strings.find(b"\0", rel)
        return strings[rel : nul if nul >= 0 else None].decode(errors="replace")

    def split(offsets: list[int]) -> tuple[str, ...]:
        return tuple(p for off in offsets for p in string(off).split(":") if p)

    return ElfInfo(
        elf_class=head[4], machine=machine, interp=interp,
        needed=tuple(n for n in (string(o) for o in needed_off) if n),
        rpath=split(rpath_off), runpath=split(runpath_off),
    )


def shebang(path: str) -> tuple[str, str | None] | None:
    """(interpreter, first argument) of a ``#!`` script, else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode(errors="replace").strip()
    if not line:
        return None
    parts = line.split(None, 1)
    return parts[0], (parts[1].strip() if len(parts) > 1 else None)


def ld_so_conf_dirs(conf: str = "/etc/ld.so.conf", _seen: set[str] | None = None) -> list[str]:
    """Directories listed in ld.so.conf, following ``include`` globs (what ld.so.cache indexes)."""
    seen = _seen if _seen is not None else set()
    if conf in seen:
        return []
    seen.add(conf)
    try:
        with open(conf) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    dirs: list[str] = []
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include"):
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(conf), pattern)
            for inc in sorted(glob.glob(pattern)):
                dirs += ld_so_conf_dirs(inc, seen)
        elif line.startswith("/"):
            dirs.append(line.split("=", 1)[0].strip())
    return dirs


def default_dirs(info: ElfInfo) -> list[str]:
    """The loader's compiled-in search dirs for this class/machine."""
    triplet = _TRIPLETS.get(info.machine)
    dirs = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
    if info.elf_class == 2:
        dirs += ["/lib64", "/usr/lib64"]
    return dirs + ["/lib", "/usr/lib"]


def _expand(entry: str, origin: str) -> str:
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


def _compatible(path: str, want: ElfInfo) -> bool:
    info = read_elf(path)
    return info is not None and info.elf_class == want.elf_class and info.machine == want.machine


@dataclass(frozen=True)
class Closure:
    files: tuple[str, ...]  # canonical paths: the binary, its loader, every library (+ hwcaps variants)
    missing: tuple[str, ...]  # DT_NEEDED names no search dir provided
    # the same files as the kernel and the loader name them (PT_INTERP, the search dir a library was
    # found in, the PATH entry): a composed root recreates the links on the way (viewplan.py)
    named: tuple[str, ...] = ()


def closure(binary: str, path_env: str | None = None, conf_dirs: list[str] | None = None) -> Closure:
    """Every file the loader will open to start ``binary`` (which must be an absolute path)."""
    return _closure([binary], path_env, conf_dirs)


EXTENSION_DEPTH = 32  # an interpreter's library tree is a few levels deep; nothing below this is looked at


def _shared_objects(directory: str) -> list[str]:
    """Regular ``*.so*`` files beneath ``directory``: an explicit stack (never recursion), links not
    followed, at most EXTENSION_DEPTH levels."""
    found: list[str] = []
    stack = [(directory, 0)]
    while stack:
        top, depth = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < EXTENSION_DEPTH:
                        stack.append((entry.path, depth + 1))
                elif (entry.name.endswith(".so") or ".so." in entry.name) and entry.is_file(follow_symlinks=False):
                    found.append(entry.path)
            except OSError:
                continue
    return found


def extension_closure(directory: str, path_env: str | None = None, conf_dirs: list[str] | None = None) -> Closure:
    """Libraries that the shared objects under an interpreter_runtime dir need, outside that dir.

    A Python extension module (``lib-dynload/_ctypes*.so`` needs ``libffi.so.8``) is dlopen()ed at
    run time, so the interpreter binary's own closure does not contain its libraries.
    """
    objects = [path for path in _shared_objects(directory) if read_elf(path) is not None]
    found = _closure(objects, path_env, conf_dirs)
    inside = os.path.join(os.path.realpath(directory), "")
    return Closure(tuple(f for f in found.files if not f.startswith(inside)), found.missing,
                   tuple(n for n in found.named if not os.path.realpath(n).startswith(inside)))


def _closure(roots: list[str], path_env: str | None, conf_dirs: list[str] | None) -> Closure:
    conf = ld_so_conf_dirs() if conf_dirs is None else conf_dirs
    files: dict[str, None] = {}
    as_named: dict[str, None] = {}
    missing: list[str] = []
    queue: list[tuple[str, tuple[str, ...]]] = []  # (path, rpath inherited from the executable)

    def add(path: str, inherited_rpath: tuple[str, ...] = ()) -> None:
        real = os.path.realpath(path)
        if not os.path.exists(real):
            return
        as_named[os.path.abspath(path)] = None
        if real in files:
            return
        files[real] = None
        queue.append((path, inherited_rpath))

    for binary in roots:
        bang = shebang(binary)
        add(binary)
        if bang is not None:  # the kernel execs the interpreter: it needs execute too
            interp, arg = bang
            add(interp)
            if os.path.basename(interp) == "env" and arg:
                named = arg.split()[0]
                if named.startswith("-"):
                    named = next((a for a in arg.split() if not a.startswith("-") and "=" not in a), "")
                found = shutil.which(named, path=path_env) if named else None
                if found:
                    add(found)
    exe_rpath: tuple[str, ...] | None = None
    while queue:
        path, inherited = queue.pop(0)
        info = read_elf(path)
        if info is None:
            continue
        origin = os.path.dirname(os.path.realpath(path))
        if exe_rpath is None and len(roots) == 1:  # the first ELF popped is the executable (or a script's interpreter)
            exe_rpath = () if info.runpath else tuple(_expand(r, origin) for r in info.rpath)
        if info.interp:
            add(info.interp)
        own_rpath = () if info.runpath else tuple(_expand(r, origin) for r in info.rpath)
        search = list(own_rpath) + [r for r in inherited if r not in own_rpath]
        search += [_expand(r, origin) for r in info.runpath] + conf + default_dirs(info)
        for name in info.needed:
            if "/" in name:
                add(name if os.path.isabs(name) else os.path.join(origin, name), inherited)
                continue
            found = None
            for d in search:
                candidate = os.path.join(d, name)
                if os.path.isfile(candidate) and _compatible(candidate, info):
                    found = candidate
                    break
            if found is None:
                missing.append(name)
                continue
            add(found, exe_rpath or ())
            for variant in glob.glob(os.path.join(os.path.dirname(found), "glibc-hwcaps", "*", name)):
                add(variant, exe_rpath or ())
    return Closure(tuple(files), tuple(dict.fromkeys(missing)), tuple(as_named))
