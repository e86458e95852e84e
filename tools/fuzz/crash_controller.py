#!/usr/bin/env python3
"""Crash safety of the controller's store (issue 32, point 3), as crash_kv.py does for the KV store.

In a loop: start ``python -m twisted_namesrv --controller-port 0`` with its controller store in
DIR, and while a pipelined client changes the controller's state as fast as it is answered -
for N counting up across the whole run, CONTROLLER_APPLY_BROKER_ID of broker id 1 in a new group
g-N, then CONTROLLER_ELECT_MASTER of that broker in g-N (its first master: epoch 1) - SIGKILL
the server at a random moment after the first acknowledgements.  After every kill the server is
started again on the same store, and for every group:

- an acknowledged apply is still there: GET_NEXT_BROKER_ID answers 2, and applying id 1 with
  another registerCheckCode is refused (2014) - a broker's id is never forgotten;
- an acknowledged election is still there: GET_REPLICA_INFO names broker 1 master at epoch 1;
- nothing beyond what was sent exists (a group after the last one sent answers next id 1).

With ``--fault ENOSPC`` the store lives on a small tmpfs that keeps filling up and emptying while
the client writes, with ``--fault EMFILE`` the server's fd limit keeps dropping to what it uses,
with ``--fault EIO`` its writes and fsyncs keep failing (eio_namesrv.py; squeeze.py): some changes
are answered with an error, and a group whose apply was answered with an error must not exist after
the restart (GET_NEXT_BROKER_ID answers 1).  The issue's case - a
failed append's half record followed by the next good one, and a restart that says "corrupt at
byte N" - is a start failure here.

Prints iterations, acknowledged changes, violations (must be 0) and how far the store was behind
the last change sent.  ``run()`` is what the test calls.

  .venv/bin/python tools/fuzz/crash_controller.py --iterations 200
  .venv/bin/python tools/fuzz/crash_controller.py --iterations 50 --fault ENOSPC   # as root
"""

from __future__ import annotations

import argparse
import json
import random
import re
import socket
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from namesrv_proc import HOST, NamesrvProcess, ServerStartError  # noqa: E402
from squeeze import DiskSqueezer, EioSqueezer, FdSqueezer, Squeezer, eio_launcher, tiny_disk  # noqa: E402

from twisted_namesrv.controller.codes import ControllerRequestCode as Req  # noqa: E402
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand  # noqa: E402

CLUSTER = "CrashCluster"
_CONTROLLER = re.compile(rb"controller listening on 127\.0\.0\.1:(\d+)")


@dataclass
class Summary:
    iterations: int = 0
    applies_acked: int = 0
    elects_acked: int = 0
    start_failures: int = 0
    violations: list[str] = field(default_factory=list)
    lag: list[int] = field(default_factory=list)  # groups sent but not acknowledged, per kill
    refused: int = 0  # applies answered with an error (the faults hit)
    fault: str | None = None


class Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=10)
        self.decoder = FrameDecoder()
        self.opaque = 0
        self.pending: list[RemotingCommand] = []

    def send(self, code: int, ext: dict[str, str]) -> int:
        self.opaque += 1
        self.sock.sendall(RemotingCommand.request(code, ext, opaque=self.opaque).encode())
        return self.opaque

    def receive(self) -> RemotingCommand:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.pending += [RemotingCommand.decode(f) for f in self.decoder.feed(data)]
        return self.pending.pop(0)

    def call(self, code: int, ext: dict[str, str]) -> RemotingCommand:
        self.send(code, ext)
        return self.receive()

    def close(self) -> None:
        self.sock.close()


def controller_port(server: NamesrvProcess, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = _CONTROLLER.search(server.log_path.read_bytes())
        if match:
            return int(match.group(1))
        time.sleep(0.005)
    raise ServerStartError("no controller line in the log")


def apply(group: str, check: str) -> tuple[int, dict[str, str]]:
    return Req.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CLUSTER, "brokerName": group, "appliedBrokerId": "1",
                                            "registerCheckCode": check}


def elect(group: str) -> tuple[int, dict[str, str]]:
    return Req.CONTROLLER_ELECT_MASTER, {"clusterName": CLUSTER, "brokerName": group, "brokerId": "1",
                                         "designateElect": "false"}


def start(workdir: Path, attempt: int, fault: str | None = None) -> tuple[NamesrvProcess, int]:
    log = workdir / f"server-{attempt}.log"
    launcher = eio_launcher(workdir / "eio-on", workdir / "data") if fault == "EIO" else None
    server = NamesrvProcess(["--data-dir", str(workdir / "data"), "--controller-port", "0"], log, workdir,
                            launcher=launcher)
    server.wait_ready()
    return server, controller_port(server)


def verify(port: int, sent: int, applied: list[int], elected: list[int], summary: Summary,
           refused: list[int] = ()) -> None:  # type: ignore[assignment]
    """The last acknowledged changes are there (every one, in the last restart), nothing beyond
    what was sent, nothing whose apply was answered with an error."""
    client = Client(port)
    try:
        for n in refused:
            next_id = client.call(Req.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CLUSTER, "brokerName": f"g-{n}"})
            if next_id.ext.get("nextBrokerId") != "1":
                summary.violations.append(f"g-{n}: its apply was answered with an error, yet it exists")
        for n in applied:
            group = f"g-{n}"
            next_id = client.call(Req.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CLUSTER, "brokerName": group})
            if next_id.ext.get("nextBrokerId") != "2":
                summary.violations.append(f"{group}: acknowledged apply lost (next id {next_id.ext})")
            stolen = client.call(*apply(group, "127.0.0.1:1;thief"))
            if stolen.code != 2014:
                summary.violations.append(f"{group}: a taken id was given again (code {stolen.code})")
        for n in elected:
            info = client.call(Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": f"g-{n}"})
            if (info.code, info.ext.get("masterBrokerId"), info.ext.get("masterEpoch")) != (0, "1", "1"):
                summary.violations.append(f"g-{n}: acknowledged election lost ({info.code} {info.ext})")
        beyond = client.call(Req.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CLUSTER, "brokerName": f"g-{sent + 1}"})
        if beyond.ext.get("nextBrokerId") != "1":
            summary.violations.append(f"g-{sent + 1}: exists though never sent")
    finally:
        client.close()


def run(iterations: int = 50, max_seconds: float = 120, workdir: Path | None = None, seed: int = 32,
        kill_after: tuple[float, float] = (0.0, 0.05), fault: str | None = None) -> Summary:
    """``fault``: None, "ENOSPC" (the store on a small tmpfs kept filling up), "EMFILE" or "EIO"."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="crash-controller-"))
    if fault == "ENOSPC":
        with tiny_disk(workdir / "data", "512k"):
            return _run(iterations, max_seconds, workdir, seed, kill_after, fault)
    return _run(iterations, max_seconds, workdir, seed, kill_after, fault)


def _run(iterations: int, max_seconds: float, workdir: Path, seed: int, kill_after: tuple[float, float],
         fault: str | None) -> Summary:
    rng = random.Random(seed)
    summary = Summary(fault=fault)
    refused: list[int] = []  # groups whose apply was answered with an error
    n = 0  # the last group sent
    applied: list[int] = []  # groups whose apply / election was acknowledged
    elected: list[int] = []
    began = time.monotonic()
    for attempt in range(iterations):
        if time.monotonic() - began > max_seconds:
            break
        try:
            server, port = start(workdir, attempt, fault)
        except ServerStartError as exc:
            summary.start_failures += 1
            summary.violations.append(f"restart {attempt}: {exc}")
            break
        if applied or refused:
            verify(port, n, applied[-4:], elected[-4:], summary, refused[-4:])
        client = Client(port)
        killer = None
        squeezer: Squeezer | None = None
        if fault == "ENOSPC":
            squeezer = DiskSqueezer(workdir / "data", rng.randrange(1 << 30))
        elif fault == "EMFILE":
            squeezer = FdSqueezer(server.proc.pid, rng.randrange(1 << 30))
        elif fault == "EIO":
            squeezer = EioSqueezer(workdir / "eio-on", rng.randrange(1 << 30))
        try:
            while True:
                n += 1
                group = f"g-{n}"
                client.send(*apply(group, f"127.0.0.1:{10000 + n % 50000};{n}"))
                client.send(*elect(group))
                a, e = client.receive(), client.receive()
                if a.code == 0:
                    applied.append(n)
                    summary.applies_acked += 1
                else:
                    refused.append(n)
                    summary.refused += 1
                if e.code == 0:
                    elected.append(n)
                    summary.elects_acked += 1
                if killer is None:  # the first answers came (the connection was accepted): squeeze, then kill
                    if squeezer is not None:
                        squeezer.start()
                    killer = threading.Timer(rng.uniform(*kill_after), server.kill)
                    killer.start()
        except (ConnectionError, OSError):
            pass
        finally:
            client.close()
            if killer is not None:
                killer.join()
            else:
                server.kill()
            if squeezer is not None and squeezer.is_alive():
                squeezer.stop()
        summary.lag.append(n - (applied[-1] if applied else 0))
        summary.iterations += 1
    try:
        server, port = start(workdir, iterations, fault)
        verify(port, n, applied, elected, summary, refused)  # every change of the whole run
        server.stop()
    except ServerStartError as exc:
        summary.violations.append(f"last restart: {exc}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--max-seconds", type=float, default=1800)
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--json", help="write the summary here too")
    parser.add_argument("--fault", choices=["ENOSPC", "EMFILE", "EIO"], help="a disk kept filling up / an fd table "
                        "kept running full / a device kept failing while writing (the first two as root)")
    args = parser.parse_args()
    kill_after = (0.0, 0.3) if args.fault else (0.0, 0.05)  # under a fault: time for the squeezes to come
    summary = run(args.iterations, args.max_seconds, seed=args.seed, kill_after=kill_after, fault=args.fault)
    print(f"iterations {summary.iterations}, applies acknowledged {summary.applies_acked}, elections "
          f"acknowledged {summary.elects_acked}, violations {len(summary.violations)}, start failures "
          f"{summary.start_failures}, lag max {max(summary.lag or [0])}, answered with an error {summary.refused}"
          f"{' under ' + summary.fault if summary.fault else ''}")
    for violation in summary.violations[:20]:
        print("  ", violation)
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(summary), indent=1))
    sys.exit(1 if summary.violations else 0)


if __name__ == "__main__":
    main()
