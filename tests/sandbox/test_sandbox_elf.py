"""PT_INTERP + DT_NEEDED closure resolution on synthetic ELF files (and the host's own bash)."""

from __future__ import annotations

import os
import shutil
import struct

import pytest

from mur.sandbox import elf

BASE = 0x400000


def make_elf(path, *, interp=None, needed=(), rpath=None, runpath=None, elf_class=2, machine=62):
    """Write a minimal little-endian ELF: PT_LOAD over the whole file, PT_INTERP, PT_DYNAMIC."""
    is64 = elf_class == 2
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    phnum = 3
    off = ehsize + phnum * phentsize
    interp_bytes = (interp.encode() + b"\0") if interp else b"\0"
    interp_off = off
    strtab = b"\0"
    names = {}
    for s in list(needed) + [x for x in (rpath, runpath) if x]:
        names[s] = len(strtab)
        strtab += s.encode() + b"\0"
    strtab_off = interp_off + len(interp_bytes)
    dyn = [(1, names[n]) for n in needed]
    if rpath:
        dyn.append((15, names[rpath]))
    if runpath:
        dyn.append((29, names[runpath]))
    dyn += [(5, BASE + strtab_off), (10, len(strtab)), (0, 0)]
    dyn_off = strtab_off + len(strtab)
    dyn_fmt = "<qQ" if is64 else "<iI"
    dyn_bytes = b"".join(struct.pack(dyn_fmt, t, v) for t, v in dyn)
    total = dyn_off + len(dyn_bytes)
    ident = b"\x7fELF" + bytes([elf_class, 1, 1]) + b"\0" * 9
    if is64:
        header = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, ehsize, 0, 0, ehsize, phentsize, phnum, 0, 0, 0)
        ph = lambda t, o, size: struct.pack("<IIQQQQQQ", t, 4, o, BASE + o, BASE + o, size, size, 8)  # noqa: E731
    else:
        header = ident + struct.pack("<HHIIIIIHHHHHH", 3, machine, 1, 0, ehsize, 0, 0, ehsize, phentsize, phnum, 0, 0, 0)
        ph = lambda t, o, size: struct.pack("<IIIIIIII", t, o, BASE + o, BASE + o, size, size, 4, 4)  # noqa: E731
    phdrs = ph(1, 0, total) + (ph(3, interp_off, len(interp_bytes)) if interp else ph(4, 0, 0)) + ph(2, dyn_off, len(dyn_bytes))
    data = header + phdrs + interp_bytes + strtab + dyn_bytes
    assert len(data) == total
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o755)
    return str(path)


def test_read_elf_parses_interp_needed_and_paths(tmp_path):
    path = make_elf(tmp_path / "tool", interp="/lib/ld.so", needed=("liba.so.1", "libb.so"),
                    rpath="/opt/x:$ORIGIN/../lib", runpath=None)
    info = elf.read_elf(path)
    assert info.interp == "/lib/ld.so" and info.needed == ("liba.so.1", "libb.so")
    assert info.rpath == ("/opt/x", "$ORIGIN/../lib") and info.runpath == ()
    assert (info.elf_class, info.machine) == (2, 62)


def test_not_an_elf(tmp_path):
    (tmp_path / "text").write_text("hello")
    assert elf.read_elf(str(tmp_path / "text")) is None


def test_closure_follows_runpath_origin_transitively_and_skips_wrong_class(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib32").mkdir()
    loader = make_elf(tmp_path / "lib" / "ld.so")
    make_elf(tmp_path / "lib32" / "libdep.so", elf_class=1, machine=3)  # wrong class: first in order, skipped
    dep = make_elf(tmp_path / "lib" / "libdep.so")
    top = make_elf(tmp_path / "lib" / "libtop.so", needed=("libdep.so",), runpath="$ORIGIN/../lib32:$ORIGIN")
    binary = make_elf(tmp_path / "bin" / "tool", interp=loader, needed=("libtop.so",), runpath="$ORIGIN/../lib")
    (tmp_path / "lib" / "unrelated.so").write_bytes(b"x")
    result = elf.closure(binary, conf_dirs=[])
    assert set(result.files) == {binary, loader, top, dep}
    assert result.missing == ()


def test_rpath_is_ignored_when_runpath_is_present_and_missing_libs_are_reported(tmp_path):
    (tmp_path / "rp").mkdir()
    make_elf(tmp_path / "rp" / "libz9.so")
    binary = make_elf(tmp_path / "tool", needed=("libz9.so", "libnowhere-mur.so.7"),
                      rpath=str(tmp_path / "rp"), runpath="/nonexistent")
    result = elf.closure(binary, conf_dirs=[])
    assert result.files == (binary,)
    assert result.missing == ("libz9.so", "libnowhere-mur.so.7")


def test_symlinks_resolve_to_canonical_files_and_hwcaps_variants_are_included(tmp_path):
    lib = tmp_path / "lib"
    (lib / "glibc-hwcaps" / "x86-64-v3").mkdir(parents=True)
    real = make_elf(lib / "libq.so.1.2.3")
    os.symlink("libq.so.1.2.3", lib / "libq.so.1")
    variant = make_elf(lib / "glibc-hwcaps" / "x86-64-v3" / "libq.so.1")
    binary = make_elf(tmp_path / "tool", needed=("libq.so.1",), rpath=str(lib))
    assert set(elf.closure(binary, conf_dirs=[]).files) == {binary, real, variant}


def test_shebang_scripts_grant_their_interpreter_and_env_target(tmp_path):
    interp = make_elf(tmp_path / "myinterp")
    script = tmp_path / "script"
    script.write_text(f"#!{interp} -x\necho\n")
    assert elf.shebang(str(script)) == (interp, "-x")
    assert set(elf.closure(str(script), conf_dirs=[]).files) == {str(script), interp}
    env_like = make_elf(tmp_path / "env")
    target = make_elf(tmp_path / "tgt")
    script2 = tmp_path / "script2"
    script2.write_text(f"#!{env_like} -S tgt\n")
    files = set(elf.closure(str(script2), path_env=str(tmp_path), conf_dirs=[]).files)
    assert files == {str(script2), env_like, target}


def test_ld_so_conf_includes(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.conf").write_text("# comment\n/opt/a/lib\n")
    (tmp_path / "conf.d" / "b.conf").write_text("/opt/b/lib\ninclude " + str(tmp_path / "ld.so.conf") + "\n")
    (tmp_path / "ld.so.conf").write_text("include conf.d/*.conf\n/usr/local/lib\n")
    assert elf.ld_so_conf_dirs(str(tmp_path / "ld.so.conf")) == ["/opt/a/lib", "/opt/b/lib", "/usr/local/lib"]


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash on this host")
def test_host_bash_closure_contains_loader_and_libc():
    bash = os.path.realpath(shutil.which("bash"))
    result = elf.closure(bash)
    names = [os.path.basename(p) for p in result.files]
    assert result.files[0] == bash and result.missing == ()
    assert any(n.startswith("ld-linux") for n in names) and "libc.so.6" in names
    assert all(os.path.isfile(p) for p in result.files) and len(result.files) < 10



def test_extension_objects_are_found_without_recursion_and_without_following_links(tmp_path):
    """An interpreter_runtime dir is walked with an explicit stack: a chain thousands of levels deep
    is cut at EXTENSION_DEPTH, never a RecursionError; a link to a .so is not followed."""
    from mur.fsafe import Tree

    root = tmp_path / "rt"
    (root / "lib-dynload").mkdir(parents=True)
    make_elf(root / "lib-dynload" / "_ext.so", needed=("libnotthere.so.1",))
    os.symlink("/usr/lib/x86_64-linux-gnu/libc.so.6", root / "elsewhere.so")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(3000):  # deeper than Python's recursion limit
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        make_elf("/proc/self/fd/%d/deep.so" % fd, needed=("libdeep.so.1",))
    finally:
        os.close(fd)
    try:
        assert elf._shared_objects(str(root)) == [str(root / "lib-dynload" / "_ext.so")]
        assert elf.extension_closure(str(root)).missing == ("libnotthere.so.1",)
    finally:
        with Tree(tmp_path) as top:
            top.remove_tree("rt")
