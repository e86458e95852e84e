#!/usr/bin/env python3
"""The machine's floor under one-connection latency: a blocking socket loop in Python that
answers every remoting frame with one canned frame, with no event loop at all.

    python tools/bench/socket_floor.py PORT      (127.0.0.1, one connection at a time)

Nothing written in Python on this machine answers a closed loop faster; run.py measures it
beside the NameServer so the 1-connection p50 can be read against it.
"""

from __future__ import annotations

import socket
import struct
import sys

from twisted_namesrv.remoting import RemotingCommand, RequestCode

ANSWER = RemotingCommand.response_to(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=1)).encode()
_LENGTH = struct.Struct(">i")


def serve(connection: socket.socket) -> None:
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pending = b""
    while data := connection.recv(1 << 16):
        pending += data
        while len(pending) >= 4 and len(pending) >= 4 + _LENGTH.unpack_from(pending)[0]:
            pending = pending[4 + _LENGTH.unpack_from(pending)[0]:]
            connection.sendall(ANSWER)


def main(port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                serve(connection)
            except ConnectionError:
                pass


if __name__ == "__main__":
    main(int(sys.argv[1]))
