"""Controller peers on etcd, each in its own process (tests/controller/etcd_peer.py), for tests that
kill one with SIGKILL as an operator or the kernel would.

The peers need nothing from the test's reactor, so the harness reads their lines synchronously, each
wait bounded.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PEER = Path(__file__).with_name("etcd_peer.py")
REPO = Path(__file__).resolve().parents[2]


class PeerProcess:
    """One peer: its address, its process, and what it said last about the leadership."""

    def __init__(self, endpoint: str, key_prefix: str, group: str, address: str, ttl: int) -> None:
        self.address = address
        self.process = subprocess.Popen([sys.executable, str(PEER), endpoint, key_prefix, group, address, str(ttl)],
                                        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.status: dict[str, Any] = {}
        self._buffer = b""

    @property
    def is_leader(self) -> bool:
        return self.status.get("status") == "leader"

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        self.process.stdin.flush()

    def poll(self, timeout: float) -> dict[str, Any] | None:
        """The next line (a dict) within ``timeout`` s, or None; status lines also update ``status``.
        Reads the pipe unbuffered: a buffered reader would hide a second line from select()."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            with selectors.DefaultSelector() as selector:
                selector.register(self.process.stdout, selectors.EVENT_READ)
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    return None
            data = os.read(self.process.stdout.fileno(), 65536)
            if not data:
                raise AssertionError(f"peer {self.address} exited ({self.process.poll()})")
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        if "error" in message:
            raise AssertionError(f"peer {self.address}: {message['error']}")
        if "status" in message:
            self.status = message
        return message

    def ask(self, command: str, timeout: float = 10) -> dict[str, Any]:
        """Send ``command`` and return its answer (status lines on the way are kept)."""
        self.send(command)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.poll(deadline - time.monotonic())
            if message is not None and "status" not in message:
                return message
        raise AssertionError(f"peer {self.address} did not answer {command!r} within {timeout} s")

    def kill(self) -> None:
        """SIGKILL: no lease revoked, nothing said; etcd expires the lease on its own."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)

    def close(self) -> None:
        self.kill()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def wait_for(peers: list[PeerProcess], done: Callable[[], bool], timeout: float, what: str) -> None:
    """Read every live peer's lines until ``done()``; fail after ``timeout`` s naming ``what``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            states = {p.address: p.status for p in peers}
            raise AssertionError(f"not within {timeout} s: {what}; peers say {states}")
        for peer in peers:
            if peer.process.poll() is None:
                peer.poll(0.02)


@contextmanager
def peer_processes(endpoint: str, key_prefix: str, group: str, count: int, ttl: int,
                   first_port: int = 10911) -> Iterator[list[PeerProcess]]:
    """``count`` peers of one controller group, addresses 127.0.0.1:first_port and up (only named:
    nothing listens there), killed on the way out."""
    peers = [PeerProcess(endpoint, key_prefix, group, f"127.0.0.1:{first_port + i}", ttl) for i in range(count)]
    try:
        yield peers
    finally:
        for peer in peers:
            peer.close()
