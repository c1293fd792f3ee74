"""A port forward (`mur send` / `status` to an SSH deployment's loopback-bound service) whose SSH link
dies under it: its clients are closed and nothing surfaces as a traceback.

Each client of a forward is piped on a thread of its own; closing that client's channel sends a
message over the link, which a dead link refuses (paramiko raises EOFError). That escaped the
thread as an unhandled exception: a traceback on the operator's terminal, seen in the fault
suite's kill-9 scenario. pyproject.toml makes any unhandled thread exception fail the test that
raised it, so this test fails on the old code."""

from __future__ import annotations

import socket
import time

import pytest

from mur.deploy.targets.ssh import SSHTarget
from mur.testing.relay import Relay

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd]


def test_clients_of_a_forward_end_quietly_when_its_link_is_cut(sshd_vm):
    vm = sshd_vm
    with Relay(vm.port, name="forward-link") as relay:
        kind, b64 = vm.host_pub.split()[:2]
        known = vm.workdir / "known_hosts_forward"
        known.write_text(f"[127.0.0.1]:{relay.port} {kind} {b64}\n")
        target = SSHTarget("127.0.0.1", user="root", port=relay.port, key_file=str(vm.key), known_hosts=str(known))
        try:
            with target.forward(vm.port) as fw:  # sshd itself, reached from inside the target
                clients = [socket.create_connection(("127.0.0.1", fw.port), timeout=10) for _ in range(3)]
                for client in clients:
                    assert client.recv(64).startswith(b"SSH-2.0-")  # each client is piped through
                # The link dies for writing while paramiko still holds the channels open (what a
                # reset seen first by a writer looks like): the next message sent fails.
                relay.blackhole()
                target._transport().sock.shutdown(socket.SHUT_WR)
                clients[0].close()  # its pipe ends and closes its channel over the dead link
                time.sleep(1.0)
                relay.cut()
                for client in clients[1:]:
                    client.settimeout(15)
                    try:
                        while client.recv(65536):
                            pass
                    except OSError:
                        pass
                    client.close()
                time.sleep(0.5)  # the pipe threads close their channels over the dead link
        finally:
            target.close()
