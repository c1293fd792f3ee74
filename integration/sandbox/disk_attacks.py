"""The ways past a disk ceiling (issue 27), as python3 scripts a tool runs in its workdir; each prints
one JSON line saying how far it got. The same script run bare (a plain process in a plain directory)
is the control: it gets the whole way, so a sandboxed run that stops short was stopped by the
ceiling, not by a broken attack. ``argv[1]``: the bytes (or inodes, levels) to try for.
"""

from __future__ import annotations

PRELUDE = r"""
import ctypes, errno, json, os, sys
want = int(sys.argv[1])
out = {"want": want, "got": 0, "error": None}
MiB = 1 << 20
def done(**kw):
    out.update(kw)
    print(json.dumps(out), flush=True)
def fail(exc):
    out["error"] = errno.errorcode.get(exc.errno, str(exc.errno)) if isinstance(exc, OSError) else repr(exc)
"""

# A writer as fast as the disk takes it: no pause between writes for a poll to fall into.
FILL = PRELUDE + r"""
chunk = b"\xa5" * MiB
try:
    with open("fill.bin", "wb", buffering=0) as fh:
        while out["got"] < want:
            out["got"] += fh.write(chunk)
except OSError as exc:
    fail(exc)
done(blocks=os.stat("fill.bin").st_blocks * 512)
"""

# fallocate(FALLOC_FL_KEEP_SIZE): blocks reserved, st_size stays 0.
FALLOCATE = PRELUDE + r"""
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("prealloc.bin", os.O_WRONLY | os.O_CREAT, 0o644)
step = 4 * MiB
while out["got"] < want:
    if libc.fallocate(fd, 1, ctypes.c_long(out["got"]), ctypes.c_long(step)) != 0:  # 1: FALLOC_FL_KEEP_SIZE
        out["error"] = errno.errorcode.get(ctypes.get_errno())
        break
    out["got"] += step
st = os.fstat(fd)
done(size=st.st_size, blocks=st.st_blocks * 512)
"""

# O_TMPFILE: a file with no name anywhere, held open while the ceiling is checked.
TMPFILE = PRELUDE + r"""
import time
fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
chunk = b"\x5a" * MiB
try:
    while out["got"] < want:
        out["got"] += os.write(fd, chunk)
except OSError as exc:
    fail(exc)
done(blocks=os.fstat(fd).st_blocks * 512)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)  # held open: a guard must see it
"""

# Directories, long symlink targets and extended attributes: blocks a size sum counts as 0.
METADATA = PRELUDE + r"""
os.makedirs("meta", exist_ok=True)
os.chdir("meta")
total = 0
i = 0
try:
    while total < want:
        d = f"d{i}"
        os.mkdir(d)
        for j in range(8):
            os.mkdir(f"{d}/{j:0200d}")  # long names: directory blocks
        os.symlink("t" * 900, f"{d}/link")  # a target too long to live in the inode (and under a 1 KiB block)
        try:
            os.setxattr(d, "user.mur", b"x" * 700)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
        total = sum(os.lstat(os.path.join(r, n)).st_blocks * 512 for r, ds, fs in os.walk(".")
                    for n in ds + fs) if i % 16 == 0 else total + 9 * 4096
        i += 1
except OSError as exc:
    fail(exc)
done(got=total, dirs=i)
"""

# A chain of directories `want` levels deep (relative mkdir + chdir: no path is ever long).
DEEP = PRELUDE + r"""
try:
    for i in range(want):
        os.mkdir("d")
        os.chdir("d")
        out["got"] = i + 1
    with open("leaf", "w") as fh:
        fh.write("bottom")
except OSError as exc:
    fail(exc)
done()
"""

# Many small inodes: empty files, which take no data block at all.
INODES = PRELUDE + r"""
os.makedirs("many", exist_ok=True)
try:
    for i in range(want):
        os.close(os.open(f"many/{i}", os.O_WRONLY | os.O_CREAT, 0o644))
        out["got"] = i + 1
except OSError as exc:
    fail(exc)
done()
"""

# Metadata of host paths outside every grant: does the path exist, its size, owner, times, a link's
# target, an extended attribute. ``argv[1:]``: the paths. One result per path per call.
PEEK = r"""
import errno, json, os, sys
out = {}
for path in sys.argv[1:]:
    r = {}
    for name, call in (("stat", lambda p: list(os.stat(p, follow_symlinks=False))[:8]),
                       ("readlink", os.readlink), ("getxattr", lambda p: os.getxattr(p, "user.mur", follow_symlinks=False).decode()),
                       ("listxattr", lambda p: os.listxattr(p, follow_symlinks=False)),
                       ("access", lambda p: os.access(p, os.F_OK)), ("listdir", lambda p: len(os.listdir(p)))):
        try:
            value = call(path)
            r[name] = "ok" if value is not False else "ENOENT"
        except OSError as exc:
            r[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    out[path] = r
print(json.dumps(out))
"""

ATTACKS = {"fill": FILL, "fallocate": FALLOCATE, "tmpfile": TMPFILE, "metadata": METADATA}
