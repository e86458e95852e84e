"""A real etcd for the tests: Debian's ``etcd`` (package etcd-server) on 127.0.0.1, random ports, a
temporary data directory, stopped and removed afterwards.

Where the binary is missing the tests skip, saying how to get it; in CI (CI=true, where
``tools/setup-env.sh --test`` installs it) a missing etcd is a failure, never a silent skip.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import free_port

START_TIMEOUT = 20  # seconds etcd may take to answer after it starts
PR_SET_PDEATHSIG = 1  # prctl(2)


def require_etcd() -> str:
    binary = shutil.which("etcd")
    if binary is None:
        message = ("etcd is not installed: the controller's high-availability tests run a real etcd "
                   "(apt-get install etcd-server, or tools/setup-env.sh --test as root)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


@dataclass
class EtcdServer:
    """One single-member etcd cluster; ``endpoint`` is its client URL."""

    process: subprocess.Popen[bytes]
    endpoint: str
    data_dir: Path
    log_path: Path

    def kill(self) -> None:
        """SIGKILL, as a crashed machine."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, so no etcd outlives a killed run."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the fixture's teardown still stops it


def _answers(endpoint: str) -> bool:
    request = urllib.request.Request(f"{endpoint}/v3/kv/range", data=json.dumps({"key": "AA=="}).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_etcd(workdir: Path) -> EtcdServer:
    """One single-member cluster."""
    return start_etcd_cluster(workdir, 1)[0]


def start_etcd_cluster(workdir: Path, members: int) -> list[EtcdServer]:
    """``members`` etcd processes forming one cluster, each answering (a quorum is up) on return."""
    binary = require_etcd()
    ports: set[int] = set()
    while len(ports) < 2 * members:
        ports.add(free_port())
    client_ports, peer_ports = sorted(ports)[:members], sorted(ports)[members:]
    names = [f"m{i}" for i in range(members)]
    cluster = ",".join(f"{name}=http://127.0.0.1:{port}" for name, port in zip(names, peer_ports, strict=True))
    servers = []
    for name, client, peer in zip(names, client_ports, peer_ports, strict=True):
        endpoint = f"http://127.0.0.1:{client}"
        data_dir, log_path = workdir / f"etcd-{name}", workdir / f"etcd-{name}.log"
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(
                [binary, "--name", name, "--data-dir", str(data_dir),
                 "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", cluster, "--initial-cluster-token", workdir.name, "--log-level", "warn"],
                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent)
        servers.append(EtcdServer(process, endpoint, data_dir, log_path))
    deadline = time.monotonic() + START_TIMEOUT
    for server in servers:
        while not _answers(server.endpoint):
            if server.process.poll() is not None or time.monotonic() > deadline:
                for each in servers:
                    each.stop()
                log = server.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"etcd did not start on {server.endpoint}: {log}")
            time.sleep(0.1)
    return servers


@pytest.fixture(scope="module")
def etcd() -> Iterator[EtcdServer]:
    """One etcd per test module (each test uses its own key prefix)."""
    require_etcd()
    workdir = Path(tempfile.mkdtemp(prefix="namesrv-etcd-"))
    server = start_etcd(workdir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
