"""mur.caphost's pieces without a host: frames and descriptors on the wire, the code key, the socket's
directory, the security context the host compares, and what a client hands a capsule."""

from __future__ import annotations

import os
import resource
import socket

import pytest

from mur.caphost import client, context, wire


def test_a_frame_carries_json_and_descriptors(tmp_path):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    note = tmp_path / "note.txt"
    note.write_text("through the socket")
    fd = os.open(note, os.O_RDONLY)
    try:
        wire.send(a, {"argv": ["run", "-t", "x"], "env": {"K": "v" * 10_000}}, [fd])
        got, fds = wire.recv(b)
        assert got == {"argv": ["run", "-t", "x"], "env": {"K": "v" * 10_000}} and len(fds) == 1
        assert os.read(fds[0], 100) == b"through the socket"
        os.close(fds[0])
        assert wire.peer_uid(b) == os.geteuid() and wire.peer_pid(b) == os.getpid()
        a.close()
        assert wire.recv(b) == (None, [])  # end of stream
    finally:
        os.close(fd)
        b.close()


def test_an_oversized_frame_is_refused():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        a.sendall((wire.MAX_FRAME + 1).to_bytes(4, "big"))
        with pytest.raises(ValueError):
            wire.recv(b)


def test_the_code_key_is_stable_and_the_socket_lives_in_a_private_dir(tmp_path, monkeypatch):
    assert wire.code_key() == wire.code_key() and len(wire.code_key()) == 16
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    path = wire.socket_path("k" * 16)
    assert path == tmp_path / ".murmur" / "run" / f"caphost-{'k' * 16}.sock"
    assert os.stat(path.parent).st_mode & 0o777 == 0o700
    os.chmod(path.parent, 0o755)  # someone else could plant a socket there: not used
    assert wire.socket_path("k" * 16) is None


def test_a_long_socket_path_is_reached_through_proc(tmp_path):
    deep = tmp_path.joinpath(*["d" * 20] * 6)
    deep.mkdir(parents=True)
    path = deep / "caphost-x.sock"
    assert len(os.fsencode(path)) > wire.SOCKET_MAX
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    wire.addressed(server, path, "bind")
    server.listen(1)
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    wire.addressed(peer, path, "connect")
    conn, _ = server.accept()
    for s in (conn, peer, server):
        s.close()
    assert path.exists()


def test_the_security_context_names_what_differs():
    mine = context.security_context("self")
    assert mine["Uid"] and mine["ns:mnt"] and context.differences(mine, context.security_context(os.getpid())) == []
    other = {**mine, "CapEff": "not-" + str(mine["CapEff"]), "ns:net": "net:[1]", "lsm": "another-label"}
    assert context.differences(mine, other) == sorted(["CapEff", "ns:net"] + ([] if mine["lsm"] == "another-label" else ["lsm"]))


def test_settings_read_from_a_client_are_taken_over(tmp_path):
    taken = context.settings(os.getpid())
    assert taken["rlimits"][resource.RLIMIT_NOFILE] == resource.getrlimit(resource.RLIMIT_NOFILE)
    assert taken["affinity"] == sorted(os.sched_getaffinity(0))
    assert context.take_over(taken) is None  # what this process already has: nothing to change, nothing refused
    raised = {**taken, "rlimits": {resource.RLIMIT_NOFILE: (10, resource.RLIM_INFINITY)}}
    if os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_NOFILE)[1] != resource.RLIM_INFINITY:
        assert "rlimit" in context.take_over(raised)  # a hard limit above ours is not ours to give


def test_which_runs_go_to_the_host_and_how(monkeypatch):
    monkeypatch.setattr(client, "in_service_unit", lambda: False)
    WAIT, IF_UP = client.WAIT, client.IF_UP
    for interactive in (False, True):
        monkeypatch.setattr(client, "interactive", lambda i=interactive: i)
        for asked in (None, "auto", "", "on"):
            if asked is None:
                monkeypatch.delenv(client.ENV, raising=False)
            else:
                monkeypatch.setenv(client.ENV, asked)
            on = asked == "on"
            assert client.handoff(["build", "."]) is None
            assert client.handoff(["run", "--help"]) is None
            service = client.handoff(["run", "-m", "cap", "--json"])
            one_shot = client.handoff(["run", "-t", "x"])
            explain = client.handoff(["run", "-m", "cap", "--explain-scope"])
            if interactive:  # a one-shot run or an explain as anywhere (signals relayed); a service stays here
                assert (service, one_shot, explain) == (None, IF_UP, IF_UP)
            else:  # a first one-shot run never waits for a host to start; a service's does (or `on`)
                assert (service, one_shot, explain) == ((WAIT, WAIT, WAIT) if on else (WAIT, IF_UP, IF_UP))
        for off in ("off", "0", "no", "nonsense"):
            monkeypatch.setenv(client.ENV, off)
            assert client.handoff(["run", "-m", "cap"]) is None
            assert client.handoff(["run", "-m", "cap", "--explain-scope"]) is None
    monkeypatch.setattr(client, "interactive", lambda: False)
    monkeypatch.delenv(client.ENV, raising=False)
    monkeypatch.setattr(client, "HOSTED", True)  # in a capsule the host forked: never a second hand-off
    assert client.handoff(["run", "-m", "cap"]) is None


def test_what_stays_up():
    assert client.stays_up(["-m", "cap", "--json", "--port", "8080"])
    assert client.stays_up(["-t", "x", "--lifecycle-after-task", "sleep"])
    assert client.stays_up(["--task=x", "--lifecycle-after-task=sleep"])
    for one_shot in (["-t", "x"], ["--task", "x"], ["--task=x"], ["-tx"], ["-t", "x", "--lifecycle-after-task", "exit"]):
        assert not client.stays_up(one_shot), one_shot


def test_a_systemd_unit_keeps_its_runs_in_process(tmp_path, monkeypatch):
    cg = tmp_path / "cgroup"
    cg.write_text("0::/system.slice/agent.service\n")
    assert client.in_service_unit(str(cg))
    cg.write_text("1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n0::/user.slice\n")
    assert client.in_service_unit(str(cg))
    cg.write_text("4:memory:/process_api/c0449\n0::/\n")  # a container, a plain shell
    assert not client.in_service_unit(str(cg))
    assert not client.in_service_unit(str(tmp_path / "absent"))
    monkeypatch.delenv(client.ENV, raising=False)
    monkeypatch.setattr(client, "in_service_unit", lambda: True)
    monkeypatch.setattr(client, "interactive", lambda: False)
    assert client.handoff(["run", "-m", "cap"]) is None
    assert client.handoff(["run", "-t", "x"]) is None  # nor would it start a host in the unit after the run
    monkeypatch.setenv(client.ENV, "on")  # asked for: the operator took the unit's stop on
    assert client.handoff(["run", "-m", "cap"]) == client.WAIT


def test_a_capsule_deaf_to_sigterm_is_killed_once_its_client_is_gone(monkeypatch):
    import signal
    import socket
    import subprocess
    import sys
    import time

    from mur.cli import capsulehost

    monkeypatch.setattr(capsulehost, "ORPHAN_GRACE", 0.5)
    host = capsulehost.Host("/nonexistent.sock", idle=60.0, cli=lambda argv: None)
    deaf = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert deaf.stdout.readline() == b"ready\n"
        ours, client = socket.socketpair()
        host.children[deaf.pid] = ours
        host.selector.register(ours, capsulehost.selectors.EVENT_READ, deaf.pid)
        client.close()  # the client went away (killed)
        host._client_gone(deaf.pid)
        time.sleep(0.2)
        assert deaf.poll() is None  # SIGTERM ignored: still there within the grace
        time.sleep(0.5)
        host._kill_late_orphans()
        assert deaf.wait(5) == -signal.SIGKILL
    finally:
        if deaf.poll() is None:
            deaf.kill()


def test_a_host_is_reachable_only_once_its_imports_are_done_and_takes_its_socket_away(tmp_path):
    """listen() binds out of sight, publish() (after the preload) gives the socket its name, and the
    host's end removes it (a new host never mistakes a leftover for one on its way out). In a child
    process: a Host installs signal handlers."""
    import subprocess
    import sys

    script = f"""
import os, socket
from mur.cli import capsulehost
path = {str(tmp_path / 'h.sock')!r}
open(path, "w").close()  # a dead host's leftover
host = capsulehost.Host(path, idle=0.0, cli=lambda argv: None)
assert host.listen()
assert not os.path.exists(path) and os.path.exists(path + ".starting")
probe = socket.socket(socket.AF_UNIX)
try:
    probe.connect(path)
    raise SystemExit("reachable before publish")
except FileNotFoundError:
    pass
host.publish()
probe = socket.socket(socket.AF_UNIX)
probe.connect(path)
probe.close()
host.serve()  # idle 0: ends at once
assert not os.path.exists(path) and not os.path.exists(path + ".starting"), os.listdir(os.path.dirname(path))
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout == "ok\n", out.stderr


def test_a_host_still_importing_is_waited_for_not_started_again(tmp_path):
    """Its lock is held and its socket has no name yet: a burst of services starts one host, not one each."""
    import fcntl
    import subprocess
    import sys

    path = tmp_path / "h.sock"
    assert not client.starting(path)  # no lock file: nobody
    (tmp_path / "h.sock.lock").write_text("")
    assert not client.starting(path)  # a lock nobody holds: a dead host's
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1]); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
                               str(tmp_path / "h.sock.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        assert client.starting(path)
    finally:
        holder.stdin.close()
        holder.wait(10)
    assert not client.starting(path)
    with open(tmp_path / "h.sock.lock") as fh:  # and asking leaves the lock free for the host
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_only_runs_in_a_row_start_a_host(tmp_path):
    path = tmp_path / "h.sock"
    assert not client._recent(path)  # the first good run: remembered, no host
    assert client._recent(path)  # another within a minute: start one
    stamp = tmp_path / "h.sock.last"
    old = stamp.stat().st_mtime - client.RECENT - 5
    os.utime(stamp, (old, old))
    assert not client._recent(path)  # a run now and then (a cron job): never
    assert stamp.stat().st_mtime > old  # ... but remembered


def test_the_host_holds_for_the_cache_its_clients_use(tmp_path):
    """A client with its own compile cache (MUR_CACHE_DIR, another HOME) had the host hold nothing
    for it: its capsule deserialized its components itself (~13 ms of an ~85 ms warm run)."""
    from mur.cli import capsulehost

    assert capsulehost.cache_dir_of({"env": {"HOME": "/h"}}) == "/h/.murmur/cache/wasm"
    assert capsulehost.cache_dir_of({"env": {"HOME": "/h", "MUR_CACHE_DIR": "/c"}}) == "/c/wasm"
    assert capsulehost.cache_dir_of({"env": {"HOME": "/h", "MUR_CACHE_DIR": "rel"}}) is None  # the client's cwd's
    assert capsulehost.cache_dir_of({"env": "nonsense"}) is None
    host = capsulehost.Host.__new__(capsulehost.Host)
    host.cache_dirs = []
    for n in (1, 2, 3, 4, 5, 2):
        host._note_cache_dir({"env": {"HOME": f"/h{n}"}})
    assert host.cache_dirs == [f"/h{n}/.murmur/cache/wasm" for n in (3, 4, 5, 2)]  # the last four, latest last
