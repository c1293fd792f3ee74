"""Test guest: open a raw WASI TCP socket to 127.0.0.1:<port> and report what happened."""

import json

import wit_world
from componentize_py_types import Err
from wit_world.exports import run as types
from wit_world.imports import instance_network, network, tcp_create_socket


class Run(wit_world.exports.Run):
    def run(self, input: types.ToolInput) -> types.ToolResult:
        req = json.loads(input.data or "{}")
        stage = "instance-network"
        try:
            net = instance_network.instance_network()
            stage = "create-tcp-socket"
            sock = tcp_create_socket.create_tcp_socket(network.IpAddressFamily.IPV4)
            stage = "start-connect"
            addr = network.IpSocketAddress_Ipv4(network.Ipv4SocketAddress(req["port"], (127, 0, 0, 1)))
            sock.start_connect(net, addr)
            stage = "finish-connect"
            sock.subscribe().block()
            sock.finish_connect()
            out = {"connected": True}
        except Err as err:
            out = {"connected": False, "stage": stage, "error": str(err.value)}
        return types.ToolResult(types.Status.PASSED, None, json.dumps(out), None, False, [])
