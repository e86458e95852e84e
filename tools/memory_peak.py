#!/usr/bin/env python3
"""Peak memory of a NameServer under two unauthenticated attacks, each on a fresh server:

  stall   PEERS connections each send all but the last byte of one frame of frameMaxLength and stall
  bomb    one REGISTER_BROKER whose compressed body inflates to BOMB_MIB MiB (zeros)

usage: tools/memory_peak.py [--budget BYTES] [--peers 40] [--bomb-mib 300] [--src DIR]

``--src`` runs the server from another checkout (an older commit: before/after figures);
``--budget`` writes receiveMemoryBudget into the server's -c file (0: the key left out).
Prints one JSON object: the server's resident memory (VmRSS) at start and its peak (VmHWM)
after each attack, in MB, and how many stalled peers the server closed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

FRAME_MAX = 16 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    raise KeyError(field)


class Server:
    def __init__(self, src: Path, budget: int) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.port = free_port()
        conf = Path(self.dir.name) / "namesrv.properties"
        conf.write_text(f"receiveMemoryBudget={budget}\n" if budget else "")
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "twisted_namesrv", "--port", str(self.port), "--data-dir", self.dir.name,
             "-c", str(conf), "--log-level", "error"], env=env, cwd=self.dir.name, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        self.start_mb = status_mb(self.process.pid, "VmRSS")

    def peak_mb(self) -> float:
        return status_mb(self.process.pid, "VmHWM")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.dir.cleanup()


def stall(server: Server, peers: int) -> dict[str, object]:
    length = FRAME_MAX - 4  # the largest frame frameMaxLength accepts (its prefix included)
    header = b"{}"
    sent = struct.pack(">iI", length, len(header)) + header + bytes(length - 4 - len(header) - 1)
    sockets = []
    for _ in range(peers):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sockets.append(sock)
    view = memoryview(sent)
    for sock in sockets:
        try:
            sock.sendall(view)
        except OSError:
            pass  # closed by the server for the budget: expected with one
    time.sleep(3)
    open_left = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            open_left += sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            open_left += 1
        except OSError:
            pass
        sock.close()
    return {"peak_mb": server.peak_mb(), "peers": peers, "peers_still_open": open_left}


def bomb(server: Server, mib: int, src: Path) -> dict[str, object]:
    sys.path.insert(0, str(src))
    from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode
    from twisted_namesrv.remoting.codes import V5_3_3

    body = zlib.compress(bytes(mib * 1024 * 1024), 9)
    ext = {"clusterName": "c", "brokerAddr": "127.0.0.1:10911", "brokerName": "b", "brokerId": "0",
           "compressed": "true", "bodyCrc32": "0"}
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=1, version=V5_3_3)
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
        sock.sendall(request.encode())
        decoder, frames = FrameDecoder(), []
        while not frames:
            data = sock.recv(65536)
            if not data:
                break
            frames = decoder.feed(data)
    answer = RemotingCommand.decode(frames[0]) if frames else None
    return {"peak_mb": server.peak_mb(), "inflates_to_mib": mib, "compressed_kib": len(body) // 1024,
            "answer": None if answer is None else f"{answer.code} {answer.remark}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=0)
    parser.add_argument("--peers", type=int, default=40)
    parser.add_argument("--bomb-mib", type=int, default=300)
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    result: dict[str, object] = {"budget": args.budget or "default"}
    for name, attack in (("stall", lambda s: stall(s, args.peers)), ("bomb", lambda s: bomb(s, args.bomb_mib,
                                                                                             args.src))):
        server = Server(args.src, args.budget)
        try:
            result[name] = {"start_mb": server.start_mb, **attack(server)}
        finally:
            server.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
