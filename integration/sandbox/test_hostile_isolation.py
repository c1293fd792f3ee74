"""Classes 2-5 of the escape suite through a real `mur run`, as root and as a non-root user: the
scripted hostile model (hostile.py) opens sockets around Landlock, reaches for hosts it was not
given, acts on other processes, calls syscalls off the allowlist -- each beside a control that
succeeds bare -- and uses the legitimate tools, which must keep working.

The capsule's network.allow is the harness's own: ``http://127.0.0.1:<model port>`` (the model
server). So the allowed host is that address and port; ``localhost`` on the very same port is a
different host to the egress proxy, and another loopback port is not allowed at all.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading

import pytest

from escape_scripts import ATTACK, ATTEMPTS, INT80, LEGIT, LEGIT_OUT, PY, TOOLS, UNLISTED  # type: ignore[import-not-found]
from sbx_support import HelloHandler  # type: ignore[import-not-found]
from hostile import DEFAULT_SHELL, FINAL_TEXT, SYSTEM_PYTHON, HostileCapsule, HostileRun  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]


def py(script: str, *args: str) -> str:
    """A bash call running ``script`` with python3 (a here-doc: it fits in a pipe, no temp file)."""
    assert "PYEOF" not in script
    return f"python3 - {' '.join(args)} <<'PYEOF'\n{script}\nPYEOF"


def first_json(result) -> dict:
    return json.loads(result.data.split("\n[stderr]")[0].strip().splitlines()[-1])


def assert_ok(run: HostileRun) -> None:
    assert run.returncode == 0, run.describe()
    assert run.result_text == FINAL_TEXT, run.describe()


@pytest.fixture
def web():
    """Two loopback HTTP servers: (the one a capsule allows, one nobody allows)."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), HelloHandler) for _ in range(2)]
    for srv in servers:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield tuple(srv.server_address[1] for srv in servers)
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(params=["root", "non-root"])
def who(request):
    if request.param == "root":
        return None
    return request.getfixturevalue("unprivileged_user")


def bare(user, argv: list[str], home=None) -> subprocess.CompletedProcess:
    prefix = [] if user is None else ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
    home = str(home or (user.home if user is not None else "/root"))
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home})


class WebCapsule(HostileCapsule):
    """The harness's capsule with one more network.allow entry beside the model server's."""

    def __init__(self, *args, allow: tuple[str, ...] = (), **kw):
        super().__init__(*args, **kw)
        self.allow = allow

    def _write_manifest(self, port: int, turns: int) -> None:
        super()._write_manifest(port, turns)
        entries = ", ".join(json.dumps(e) for e in (f"http://127.0.0.1:{port}", *self.allow))
        text = self.manifest.read_text().replace(f'allow: ["http://127.0.0.1:{port}"]', f"allow: [{entries}]")
        self.manifest.write_text(text)  # in place: the owner (a non-root user's) stays


def test_sockets_and_hosts_end_to_end(who, web, tmp_path, record_escape):
    allowed, other = web
    base = who.home if who is not None else tmp_path
    capsule = WebCapsule(base / "web-capsule", user=who, shell_allow=(*DEFAULT_SHELL, "curl"),
                         allow=(f"http://127.0.0.1:{allowed}",))
    curl = "curl -s -m 10 -o /dev/null -w '%{http_code}'"
    run = capsule.run([
        py(ATTEMPTS, str(other)),  # 0: every socket family, every way around Landlock
        "echo $https_proxy",  # 1
        f"curl -s -m 10 http://127.0.0.1:{allowed}/",  # 2: the allowed host, through the proxy
        f"{curl} http://localhost:{allowed}/",  # 3: the same address and port under another name
        f"{curl} http://127.0.0.1:{other}/",  # 4: another port
        f"exec 3<>/dev/tcp/127.0.0.1/{allowed} && echo connected; echo rc=$?",  # 5: around the proxy
        f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{allowed}/; echo rc=$?",  # 6
    ])
    assert_ok(run)
    got = first_json(run.results[0])
    assert got["tcp"] == "ok:opened"  # the capsule has a network grant: TCP, and only TCP
    for name in ("mptcp", "udp", "vsock", "xdp", "netlink", "packet", "unix", "socketpair", "sendto_fastopen",
                 "sendmsg_fastopen", "listen_autobind", "bind"):
        assert got[name] == "EACCES", (name, got[name])
    assert got["io_uring"] == "EPERM"
    assert run.results[1].data.strip() == "http://127.0.0.1:3128"
    assert run.results[2].data == f"hello 127.0.0.1:{allowed}\n", run.results[2].data
    assert [r.data.strip() for r in run.results[3:5]] == ["403", "403"]
    for r in run.results[5:]:
        assert "connected" not in r.data and "hello" not in r.data
    for url in (f"http://localhost:{allowed}/", f"http://127.0.0.1:{other}/"):
        assert bare(who, ["curl", "-s", "-m", "10", url]).stdout.startswith("hello ")
    sockets = json.loads(bare(who, [SYSTEM_PYTHON, "-c", ATTEMPTS, str(other)]).stdout)
    assert sockets["mptcp"].startswith("ok:") and sockets["sendto_fastopen"].startswith("ok:")
    tag = "root" if who is None else "non-root"
    record_escape(f"mur run: sockets, other host/port, raw connect ({tag})", "EACCES / 403 / refused",
                  "bare: opens, connects, hello")


def test_other_processes_end_to_end(hostile, who, record_escape):
    victim = subprocess.Popen(["setpriv", f"--reuid={who.uid if who else 65534}", f"--regid={who.gid if who else 65534}",
                               "--clear-groups", "sleep", "60"])
    try:
        capsule = hostile(user=who)
        run = capsule.run([
            py(ATTACK, str(victim.pid)),  # 0: a process of the tools' uid (non-root) / a nobody daemon (root)
            py(ATTACK, "1"),  # 1: the namespace's init (mur and the spawner are outside: no pid names them)
            "echo $$ $PPID",  # 2
        ])
        assert_ok(run)
        for result in run.results[:2]:
            for name, value in first_json(result).items():
                assert value in ("EPERM", "EACCES", "ESRCH"), (name, value, result.call.command[:60], result.data)
        assert victim.poll() is None
        own, parent = run.results[2].data.split()[:2]
        assert parent == "0" and int(own) < 10  # a pid namespace of the session's own (root too)
        # control: a plain process of the victim's uid (the tools' own uid when not root; nobody as root)
        argv = [SYSTEM_PYTHON, "-c", ATTACK, str(victim.pid), "control"]
        control = json.loads((bare(who, argv) if who is not None else subprocess.run(
            argv, capture_output=True, text=True, timeout=60, user=65534, group=65534, extra_groups=[])).stdout)
        for name in ("kill0", "setpriority", "prlimit", "affinity", "pidfd_signal"):
            assert control[name] == "ok", (name, control)
    finally:
        victim.kill()
        victim.wait()
    tag = "root" if who is None else "non-root, same uid"
    record_escape(f"mur run: renice/prlimit/signal outside ({tag})", "EPERM / ESRCH", "the victim's uid can")


def test_syscalls_and_legitimate_tools_end_to_end(hostile, who, tmp_path, record_escape):
    capsule = hostile(user=who, shell_allow=tuple(dict.fromkeys((*DEFAULT_SHELL, *TOOLS))))
    run = capsule.run([
        py(UNLISTED),  # 0
        py(INT80),  # 1
        f"cat > py.py <<'PYEOF'\n{PY}PYEOF\nexport GIT_CONFIG_NOSYSTEM=1\n{LEGIT}",  # 2
    ])
    assert_ok(run)
    got = first_json(run.results[0])
    assert got["fchmodat2"] == "ENOSYS" and got["move_pages"] == "EPERM"
    assert run.results[1].exit_code == 128 + 31  # SIGSYS
    (tmp_path / "in.txt").write_text("b\na\nc\n")
    sha = subprocess.run(["sha256sum", str(tmp_path / "in.txt")], capture_output=True, text=True).stdout[:16]
    assert run.results[2].exit_code == 0, run.results[2].data
    stdout = run.results[2].data.split("\n[stderr]\n")[0]  # git warns about what Landlock hides (templates)
    assert stdout == LEGIT_OUT.format(sha=sha), run.results[2].data
    record_escape(f"mur run: off-allowlist syscalls, int 0x80 ({'root' if who is None else 'non-root'})",
                  "ENOSYS / killed; the tools still work", "bare: they run")


def probe_for(who, mur: list[str], home) -> dict:
    """`mur probe --json` as the uid `who` runs mur."""
    r = bare(who, [*mur, "probe", "--json"], home=home)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_explain_scope_states_the_mechanisms_in_force(who, tmp_path):
    """`mur run --explain-scope --json` (and the human report) on this host, as root and not."""
    from hostile import python_for_others  # type: ignore[import-not-found]

    base = who.home if who is not None else tmp_path
    project = base / "explain"
    project.mkdir()
    (project / "murmur.yaml").write_text(
        'name: c\nversion: "1"\ncapabilities:\n  containment: scoped\n  network:\n'
        "    allow: [https://api.example.com]\n  shell:\n    allow: [curl]\n")
    if who is not None:
        who.chown(project)
    mur = list(who.mur) if who is not None else list(python_for_others() or ())
    out = {}
    for flags in (["--json"], []):
        r = bare(who, [*mur, "run", "--explain-scope", "--no-env-file", "-m", str(project / "murmur.yaml"), *flags],
                 home=base)  # no config of the machine's own
        assert r.returncode == 0, r.stderr
        out[bool(flags)] = r.stdout
    c = json.loads(out[True])  # the flat shape session_start.effective_grants records
    host = probe_for(who, mur, base)
    assert (c["achieved_containment"], c["floor_met"], c["network_isolation"]) == (
        "sealed" if host["sealed"] else "scoped", True, "netns+egress-proxy")
    assert c["process_isolation"] == ("session-uid" if who is None else "pid-namespace")
    assert c["host_view"] == ("composed-root" if host["sealed"] else "read-only-host")
    assert "  network:   netns+egress-proxy (shell tools reach exactly the allowed hosts" in out[False]
    assert f"  view:      {c['host_view']} (" in out[False]


TTY_TRICKS = r"""
import errno, fcntl, json, os, sys
TIOCSTI = 0x5412
out = {}
for name, opener in (("stdin", lambda: 0), ("stdout", lambda: 1), ("dev_tty", lambda: os.open("/dev/tty", os.O_RDWR))):
    try:
        fd = opener()
        fcntl.ioctl(fd, TIOCSTI, b"x")
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out))
"""


def test_disclosure_terminal_core_and_loader_end_to_end(hostile, who, tmp_path, record_escape):
    """Reading a process's environ and fds (mur's uid: where the API keys live), TIOCSTI into a terminal, a
    core dump, LD_PRELOAD of a library copied into the workdir: one `mur run`, each beside a control."""
    canary = f"mur-canary-{tmp_path.name}"
    uid = who.uid if who is not None else 0
    victim = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "60"],
                              env={"PATH": "/usr/bin:/bin", "MUR_TEST_SECRET": canary})
    try:
        capsule = hostile(user=who, shell_allow=(*DEFAULT_SHELL, "grep"))
        run = capsule.run([
            f"cat /proc/{victim.pid}/environ >/dev/null 2>&1; echo rc=$?; "  # 0: mur's uid's secrets
            f"grep -l {canary} /proc/[0-9]*/environ 2>/dev/null | wc -l; "
            f"ls /proc/{victim.pid}/fd >/dev/null 2>&1; echo rc=$?",  # and its open files
            py(TTY_TRICKS),  # 1
            "python3 -c 'import resource; print(*resource.getrlimit(resource.RLIMIT_CORE))'; bash -c 'kill -SEGV $$'; echo rc=$?; ls | grep -c '^core' || true",  # 2
            "cp /lib/x86_64-linux-gnu/libc.so.6 ./l.so && LD_PRELOAD=$PWD/l.so cat /dev/null; echo rc=$?",  # 3
        ])
        assert_ok(run)
        got = run.results[0].data
        assert "[stderr]" not in got and got.split()[0] != "rc=0" and got.split()[1] == "0", got  # unreadable, anywhere
        assert got.split()[2] != "rc=0", got
        tty = first_json(run.results[1])
        assert "ok" not in tty.values(), tty
        assert tty["stdin"] == "EPERM", tty  # seccomp refuses the ioctl itself, whatever the fd
        core = run.results[2].data
        assert core.split("\n[stderr]")[0].split() == ["1", "1", "rc=139", "0"] and "core dumped" not in core, core
        preload = run.results[3].data
        assert "cannot be preloaded" in preload and "rc=0" in preload, preload  # the copy is never mapped
        # controls: the victim's uid reads its environ; a copy where exec is allowed preloads silently
        argv = ["bash", "-c", f"tr '\\0' '\\n' < /proc/{victim.pid}/environ | grep -c {canary}"]
        assert bare(who, argv).stdout.strip() == "1"
        assert bare(who, ["ls", f"/proc/{victim.pid}/fd"]).returncode == 0
        lib = (who.home if who is not None else tmp_path) / "l.so"  # a directory that uid can reach
        subprocess.run(["cp", "/lib/x86_64-linux-gnu/libc.so.6", str(lib)], check=True)
        os.chmod(lib, 0o755)
        ctl = bare(who, ["env", f"LD_PRELOAD={lib}", "cat", "/dev/null"])
        assert ctl.returncode == 0 and "cannot be preloaded" not in ctl.stderr, ctl.stderr
    finally:
        victim.kill()
        victim.wait()
    tag = "root" if who is None else "non-root"
    record_escape(f"mur run: /proc environ, TIOCSTI, core dump, LD_PRELOAD copy ({tag})",
                  "EACCES / EPERM / no core / not preloaded", "bare: environ read, library preloaded")
