"""seccomp as an allowlist (issue 12, class 5): what is not named is refused, a foreign architecture
is killed, and nothing a legitimate tool needs breaks (bash, python3, coreutils, jq, git, pipes).
"""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from sbx_support import HOST_ENV, SYSTEM_PYTHON, capabilities  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

UNLISTED = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
open("f", "w").close()
out = {}
for name, nr, args in (("fchmodat2", 452, (-100, b"f", 0o600, 0)), ("cachestat", 451, (-1, 0, 0, 0)),
                       ("lsm_list_modules", 461, (0, 0, 0)), ("mbind_unknown_999", 999, ()),
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


def bare_python(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([SYSTEM_PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=HOST_ENV,
                          cwd=cwd)


def test_syscalls_not_on_the_allowlist_get_enosys(sandbox, tmp_path, record_escape):
    sb = sandbox()
    r = sb.run("python3", args=["-c", UNLISTED])
    got = json.loads(r.stdout)
    assert got["fchmodat2"] == got["cachestat"] == got["lsm_list_modules"] == got["mbind_unknown_999"] == "ENOSYS"
    assert got["modify_ldt"] == got["move_pages"] == "EPERM"  # named refusals
    control = json.loads(bare_python(UNLISTED, tmp_path).stdout)
    assert control["fchmodat2"] == "ok" and control["lsm_list_modules"] != "ENOSYS"
    record_escape("syscalls off the allowlist (fchmodat2, lsm_*, ...)", "ENOSYS / EPERM", "fchmodat2 works")


def test_a_foreign_architecture_syscall_kills_the_tool(sandbox, tmp_path, record_escape):
    sb = sandbox()
    r = sb.run("python3", args=["-c", INT80])
    assert r.signal == signal.SIGSYS and r.stdout == ""
    control = bare_python(INT80, tmp_path)
    assert control.returncode == 0 and int(control.stdout) > 1  # the i386 getpid answered
    record_escape("i386 int 0x80 from a 64-bit tool", "killed (SIGSYS)", "returns the pid")


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


def test_legitimate_tools_still_work(sandbox, tmp_path):
    sb = sandbox(capabilities(allow=TOOLS))
    (sb.workdir / "py.py").write_text(PY)
    # git reads /etc/gitconfig, which Landlock does not grant: the system config is skipped explicitly
    r = sb.run("bash", command=LEGIT, env=[("GIT_CONFIG_NOSYSTEM", "1")])
    (tmp_path / "py.py").write_text(PY)
    control = subprocess.run(["bash", "-c", LEGIT], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             env=dict(HOST_ENV, HOME=str(tmp_path), GIT_CONFIG_NOSYSTEM="1"))
    assert control.returncode == 0, control.stderr
    assert r.exit_code == 0, r.stderr
    assert r.stdout == control.stdout
    sha = subprocess.run(["sha256sum", str(tmp_path / "in.txt")], capture_output=True, text=True).stdout[:16]
    assert r.stdout == LEGIT_OUT.format(sha=sha)


def test_as_another_user_the_allowlist_holds_and_tools_work(unprivileged_user, tmp_path):
    from asuser import run_sessions  # type: ignore[import-not-found]
    from sbx_support import python_stdlib  # type: ignore[import-not-found]

    caps = {"shell": {"allow": list(TOOLS), "interpreter_runtime": [
        {"binary": "python3", "dirs": [{"path": python_stdlib(), "list_dir": True}]}]}}
    out = run_sessions(unprivileged_user, {"sessions": [{"caps": caps}], "calls": [
        [0, {"binary": "python3", "args": ["-c", f"open('py.py', 'w').write({PY!r})"]}],
        [0, {"binary": "bash", "args": ["-c", "export GIT_CONFIG_NOSYSTEM=1\n" + LEGIT]}],
        [0, {"binary": "python3", "args": ["-c", UNLISTED]}],
        [0, {"binary": "python3", "args": ["-c", INT80]}],
    ]})
    session = out["sessions"][0]
    assert session["namespaces"] == ["user", "net", "ipc", "mnt", "pid"]
    legit, unlisted, int80 = session["results"][1:]
    assert legit["exit_code"] == 0, legit["stderr"]
    (tmp_path / "in.txt").write_text("b\na\nc\n")
    sha = subprocess.run(["sha256sum", str(tmp_path / "in.txt")], capture_output=True, text=True).stdout[:16]
    assert legit["stdout"] == LEGIT_OUT.format(sha=sha)
    got = json.loads(unlisted["stdout"])
    assert got["fchmodat2"] == "ENOSYS" and got["move_pages"] == "EPERM"
    assert int80["exit_code"] == 128 + signal.SIGSYS
