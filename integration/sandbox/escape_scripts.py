"""The attack scripts the escape suites share: run inside a sandbox (ShellSandbox, or a tool call of
the hostile model through `mur run`) and bare as the control, each prints one JSON object."""

from __future__ import annotations

# Every way of opening a socket or connecting/listening around Landlock (class 2); argv[1]: a port.
ATTEMPTS = r'''
import ctypes, errno, json, socket, sys
port = int(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok:" + str(fn())
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def sock(fam, typ, proto=0):
    s = socket.socket(fam, typ, proto); s.close(); return "opened"
attempt("tcp", lambda: sock(2, 1))
attempt("tcp6", lambda: sock(10, 1, 6))
attempt("mptcp", lambda: sock(2, 1, 262))
attempt("sctp", lambda: sock(2, 5, 132))
attempt("sctp_stream", lambda: sock(2, 1, 132))
attempt("smc_proto", lambda: sock(2, 1, 256))
attempt("udp", lambda: sock(2, 2))
attempt("icmp_raw", lambda: sock(2, 3, 1))
attempt("vsock", lambda: sock(40, 1))
attempt("xdp", lambda: sock(44, 3))
attempt("netlink", lambda: sock(16, 3))
attempt("packet", lambda: sock(17, 3))
attempt("alg", lambda: sock(38, 5))
attempt("bluetooth", lambda: sock(31, 1))
attempt("unix", lambda: sock(1, 1))
attempt("socketpair", lambda: socket.socketpair() and "opened")
def fastopen():  # blocking: sendto() itself connects (no cookie yet: SYN, then the data)
    s = socket.socket(2, 1)
    s.sendto(b"fastopen\n", 0x20000000, ("127.0.0.1", port))
    return "sent"
attempt("sendto_fastopen", fastopen)
def sendmsg_fastopen():
    s = socket.socket(2, 1)
    s.sendmsg([b"fastopen\n"], [], 0x20000000, ("127.0.0.1", port))
    return "sent"
attempt("sendmsg_fastopen", sendmsg_fastopen)
def fastopen_connect():
    s = socket.socket(2, 1)
    s.setsockopt(6, 30, 1)  # TCP_FASTOPEN_CONNECT: connect() returns before the SYN
    s.settimeout(3)
    s.connect(("127.0.0.1", port)); s.sendall(b"x\n"); return "connected"
attempt("fastopen_connect", fastopen_connect)
def v4mapped():
    s = socket.socket(10, 1); s.settimeout(3); s.connect(("::ffff:127.0.0.1", port)); return "connected"
attempt("v4mapped_connect", v4mapped)
def listen_autobind():
    s = socket.socket(2, 1); s.listen(1); return s.getsockname()
attempt("listen_autobind", listen_autobind)
def bind_any():
    s = socket.socket(2, 1); s.bind(("0.0.0.0", 0)); return s.getsockname()
attempt("bind", bind_any)
libc = ctypes.CDLL(None, use_errno=True)
class Params(ctypes.Structure):
    _fields_ = [("pad", ctypes.c_uint32 * 30)]
def uring():
    fd = libc.syscall(425, 4, ctypes.byref(Params()))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")
    return "ring"
attempt("io_uring", uring)
print(json.dumps(out))
'''

# Every call that acts on a process by pid (class 4); argv[1]: the victim, argv[2] set: a control.
ATTACK = r'''
import ctypes, errno, json, os, resource, signal, sys
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, fn):
    try:
        fn(); out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def raw(nr, *args):
    if libc.syscall(nr, *[ctypes.c_long(a) for a in args]) < 0:
        raise OSError(ctypes.get_errno(), "")
attempt("kill0", lambda: os.kill(pid, 0))
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
attempt("prlimit", lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (7, 7)))
attempt("affinity", lambda: os.sched_setaffinity(pid, {0}))
attempt("scheduler", lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))
attempt("ioprio", lambda: raw(251, 1, pid, 3 << 13))
attempt("process_madvise", lambda: raw(440, os.pidfd_open(pid), 0, 0, 0, 0))
attempt("pidfd_signal", lambda: signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGTERM))
attempt("kill_term", lambda: os.kill(pid, signal.SIGTERM))
if len(sys.argv) < 3:  # not in the controls: a bare tracer's attach would hold the victim's exit from its parent
    attempt("ptrace", lambda: raw(101, 16, pid, 0, 0))
print(json.dumps(out))
'''
CHANGES = ("kill0", "setpriority", "prlimit", "affinity", "scheduler", "ioprio", "pidfd_signal")
VICTIM = "import os, time\nopen('victim.pid', 'w').write(str(os.getpid()))\ntime.sleep(60)"

# Syscalls off the allowlist (class 5).
UNLISTED = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
open("f", "w").close()
out = {}
buf = ctypes.create_string_buffer(64)
for name, nr, args in (("fchmodat2", 452, (-100, b"f", 0o600, 0)), ("cachestat", 451, (-1, 0, 0, 0)),
                       ("lsm_list_modules", 461, (0, 0, 0)), ("mbind_unknown_999", 999, ()),
                       ("ustat", 136, (0, buf)),  # old, in every x86_64 kernel, on no allowlist
                       ("modify_ldt", 154, (0, 0, 0)), ("move_pages", 279, (0, 0, 0, 0, 0, 0))):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    out[name] = "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
print(json.dumps(out))
'''

# i386 `int 0x80` (getpid = 20) from 64-bit code: the seccomp arch check must not let it around the table
INT80 = r'''
import ctypes, mmap
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax, 20; int 0x80; ret
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
print(ctypes.CFUNCTYPE(ctypes.c_int)(addr)())
'''

# What legitimate tools do (must keep working): bash, coreutils, jq, git, python3.
LEGIT = (
    "set -euo pipefail\n"
    "printf 'b\\na\\nc\\n' > in.txt\n"
    "sort in.txt | tr a-z A-Z | head -2 | wc -l\n"
    "echo \"$(cat in.txt | sort -r | head -1)\"\n"
    "( cd .; echo subshell $(( 6 * 7 )) )\n"
    "diff <(sort in.txt) <(printf 'a\\nb\\nc\\n') && echo same\n"
    "cat <<EOF | sed 's/x/y/'\nxx here-doc\nEOF\n"
    "echo '{\"a\": [1, 2, 3]}' | jq -c '.a | map(. * 2)'\n"
    "sha256sum in.txt | cut -c1-16\n"
    "tar cf a.tar in.txt && gzip -c a.tar > a.tgz && gzip -dc a.tgz | tar tf -\n"
    "find . -name 'in.*' | xargs grep -c a\n"
    "awk '{ s = s $1 } END { print s }' in.txt\n"
    "date -u -d @0 +%Y\n"
    "git init -q repo && cd repo && git config user.email t@t && git config user.name t\n"
    "echo hi > f && git add f && git commit -qm one && git log --oneline | wc -l\n"
    "cd .. && python3 py.py\n"
)
PY = (
    "import hashlib, json, sqlite3, subprocess, tempfile, threading\n"
    "db = sqlite3.connect(':memory:'); db.execute('create table t(x)'); db.execute('insert into t values (1)')\n"
    "out = []\nt = threading.Thread(target=lambda: out.append(hashlib.sha256(b'x').hexdigest()[:8])); t.start(); t.join()\n"
    "with tempfile.NamedTemporaryFile(dir='.') as f: f.write(b'tmp')\n"
    "sub = subprocess.run(['sort'], input='z\\ny\\n', capture_output=True, text=True).stdout.split()\n"
    "print(json.dumps([db.execute('select x from t').fetchone()[0], out[0], sub]))\n"
)
LEGIT_OUT = ("2\nc\nsubshell 42\nsame\nyx here-doc\n[2,4,6]\n"
             + "{sha}\nin.txt\n1\nbac\n1970\n1\n[1, \"2d711642\", [\"y\", \"z\"]]\n")
TOOLS = ("bash", "cat", "python3", "sort", "tr", "head", "wc", "diff", "sed", "jq", "sha256sum", "cut", "tar", "gzip",
         "find", "xargs", "grep", "awk", "date", "git")
