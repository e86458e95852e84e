#!/usr/bin/env python3
"""Crash safety of the KV store and the config file (issue 5, item 4).

In a loop: start ``python -m twisted_namesrv -c DIR/namesrv.properties --kv-config-path
DIR/kvConfig.json`` on 127.0.0.1 (ephemeral port), and while two pipelined clients write as fast
as they can - PUT_KV_CONFIG CrashNS/seq=N (plus a filler key every 8th write, so the file is not
tiny) and UPDATE_NAMESRV_CONFIG productEnvName=crash-N, N counting up across the whole run -
SIGKILL the server at a random moment after the first acknowledgements.  After every kill:

- kvConfig.json parses as JSON and holds CrashNS/seq = N with
  last acknowledged PUT <= N <= last PUT sent (nothing acknowledged was lost, nothing invented);
- namesrv.properties parses as Java properties (and as the server's own configuration) and holds
  productEnvName = crash-N with the same bounds for UPDATE_NAMESRV_CONFIG;
- the next start of the server loads both (it refuses to start on a corrupt KV file).

With ``--fault ENOSPC`` the files live on a 64 KiB tmpfs that keeps filling up and emptying while
the clients write; with ``--fault EMFILE`` the server's RLIMIT_NOFILE keeps dropping to its lowest
free descriptor and back, with ``--fault EIO`` writes and fsyncs of the files keep failing with EIO
(eio_namesrv.py; squeeze.py).  Some writes then answer an error: a value whose write was
answered with an error must never be found in a file, and every restart must load the files.  An
UPDATE_NAMESRV_CONFIG whose save failed is applied in memory only, as Java's (SUCCESS with the
remark "applied in memory only, until the restart"): not an acknowledgement of a durable write, and
not a refusal either (counted apart, as unsaved).

Prints iterations, acknowledged writes, violations (must be 0), how far the files were behind the
last write sent, and how many temp files kills left behind.  ``run()`` is what the test calls.

  .venv/bin/python tools/fuzz/crash_kv.py                      # 1,000 iterations (bounded: 1 h)
  .venv/bin/python tools/fuzz/crash_kv.py --iterations 50 --json out.json
  .venv/bin/python tools/fuzz/crash_kv.py --iterations 200 --fault ENOSPC     # as root
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from namesrv_proc import HOST, NamesrvProcess, ServerStartError  # noqa: E402
from squeeze import DiskSqueezer, EioSqueezer, FdSqueezer, Squeezer, eio_launcher, tiny_disk  # noqa: E402

from twisted_namesrv import properties  # noqa: E402
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode  # noqa: E402
from twisted_namesrv.schema import SERVER_SCHEMA  # noqa: E402
from twisted_namesrv.state.config import NamesrvConfig  # noqa: E402

NAMESPACE, KEY = "CrashNS", "seq"
CONFIG_KEY = "productEnvName"


@dataclass
class Stream:
    """One kind of write: the highest N sent and the highest N acknowledged (SUCCESS)."""

    name: str
    sent: int = -1
    acked: int = -1
    acks: int = 0  # acknowledgements in this run
    errors: int = 0  # answers other than SUCCESS
    unsaved: int = 0  # SUCCESS with a remark: applied in memory only, the save failed (config updates)
    refused: set = field(default_factory=set)  # the N whose write was answered with an error


@dataclass
class Summary:
    iterations: int = 0
    kv_acks: int = 0
    config_acks: int = 0
    violations: list = field(default_factory=list)
    start_failures: int = 0
    kv_lag: list = field(default_factory=list)  # sent - found, per kill
    config_lag: list = field(default_factory=list)
    leftover_temp_files: int = 0
    kv_errors: int = 0  # writes answered with an error (the faults hit)
    config_errors: int = 0
    config_unsaved: int = 0
    squeezes: int = 0
    fault: str | None = None
    seconds: float = 0.0
    kill_after_ms: list = field(default_factory=list)

    def brief(self) -> dict:
        out = asdict(self)
        for name in ("kv_lag", "config_lag", "kill_after_ms"):
            values = out.pop(name)
            out[name + "_median_max"] = [statistics.median(values), max(values)] if values else None
        out["violations"] = self.violations[:20]
        out["violation_count"] = len(self.violations)
        return out


def kv_request(n: int, opaque: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE, "key": KEY, "value": str(n)},
                                   opaque=opaque)


def filler_request(n: int, opaque: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PUT_KV_CONFIG,
                                   {"namespace": NAMESPACE, "key": f"filler{n % 64:02d}", "value": "x" * 64 + str(n)},
                                   opaque=opaque)


def config_request(n: int, opaque: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=f"{CONFIG_KEY}=crash-{n}\n".encode(),
                                   opaque=opaque)


async def writer(port: int, stream: Stream, build, window: int, stop: asyncio.Event, first_ack: asyncio.Event) -> None:
    """Keep ``window`` writes in flight until the server dies or ``stop`` is set."""
    try:
        reader, writer_ = await asyncio.open_connection(HOST, port)
    except OSError:
        return
    inflight: dict[int, int | None] = {}  # opaque -> N (None: a filler write)
    opaque = 0
    decoder = FrameDecoder()
    try:
        while not stop.is_set():
            while len(inflight) < window:
                opaque += 1
                if stream.name == "kv" and opaque % 8 == 0:
                    inflight[opaque] = None
                    writer_.write(filler_request(stream.sent, opaque).encode())
                    continue
                stream.sent += 1
                inflight[opaque] = stream.sent
                writer_.write(build(stream.sent, opaque).encode())
            data = await reader.read(65536)
            if not data:
                return
            for frame in decoder.feed(data):
                answer = RemotingCommand.decode(frame)
                n = inflight.pop(answer.opaque, None)
                if answer.code != ResponseCode.SUCCESS:
                    stream.errors += 1
                    if n is not None:
                        stream.refused.add(n)
                elif answer.remark:  # applied in memory only: the save failed, nothing durable to expect
                    stream.unsaved += 1
                elif n is not None:
                    stream.acked = max(stream.acked, n)
                    stream.acks += 1
                    first_ack.set()
    except (OSError, ConnectionError):
        return
    finally:
        writer_.close()


def check_files(data_dir: Path, kv: Stream, config: Stream, summary: Summary, iteration: int) -> None:
    """The files after a kill: they load, and hold a state between the last acknowledged and the
    last sent write."""
    def violation(what: str) -> None:
        summary.violations.append(f"iteration {iteration}: {what}")

    kv_path = data_dir / "kvConfig.json"
    if kv.acked >= 0 or kv_path.exists():
        try:
            table = json.loads(kv_path.read_bytes())["configTable"]
            found = int(table[NAMESPACE][KEY])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            violation(f"kvConfig.json does not load: {exc!r}")
        else:
            if not kv.acked <= found <= kv.sent:
                violation(f"kvConfig.json holds seq {found}, acknowledged {kv.acked}, sent {kv.sent}")
            if found in kv.refused:
                violation(f"kvConfig.json holds seq {found}, whose write was answered with an error")
            summary.kv_lag.append(kv.sent - found)
    config_path = data_dir / "namesrv.properties"
    try:
        text = config_path.read_text(encoding="utf-8")
        props = properties.load(text)
        NamesrvConfig.from_file(str(config_path), schema=SERVER_SCHEMA)
    except (OSError, ValueError) as exc:
        violation(f"namesrv.properties does not load: {exc!r}")
        return
    value = props.get(CONFIG_KEY, "")
    if config.acked >= 0 or value.startswith("crash-"):
        try:
            found = int(value.removeprefix("crash-"))
        except ValueError:
            violation(f"namesrv.properties has {CONFIG_KEY}={value!r} after acknowledged write {config.acked}")
        else:
            if not config.acked <= found <= config.sent:
                violation(f"namesrv.properties holds crash-{found}, acknowledged {config.acked}, sent {config.sent}")
            if found in config.refused:
                violation(f"namesrv.properties holds crash-{found}, whose write was answered with an error")
            summary.config_lag.append(config.sent - found)


async def one_iteration(port: int, kv: Stream, config: Stream, window: int, kill_after: float,
                        server: NamesrvProcess, deadline: float, squeezer: Squeezer | None = None) -> float:
    """Write until the first acknowledgements, then for ``kill_after`` more seconds, then SIGKILL.
    Returns how long after the first acknowledgement the kill came."""
    stop = asyncio.Event()
    kv_ack, config_ack = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(writer(port, kv, kv_request, window, stop, kv_ack)),
             asyncio.create_task(writer(port, config, config_request, window, stop, config_ack))]
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.gather(kv_ack.wait(), config_ack.wait()), max(1.0, deadline - time.monotonic()))
    started = time.monotonic()
    if squeezer is not None:
        squeezer.start()
    await asyncio.sleep(kill_after)
    server.kill()
    killed_after = time.monotonic() - started
    if squeezer is not None:
        squeezer.stop()
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    return killed_after


def run(iterations: int = 1000, max_seconds: float = 3600, workdir: Path | None = None, seed: int = 4,
        kill_after: tuple[float, float] = (0.0, 0.3), window: int = 8, progress: bool = False,
        fault: str | None = None) -> Summary:
    """``fault``: None, "ENOSPC" (the files on a tiny tmpfs kept filling up), "EMFILE" (the server's
    fd limit kept dropping to what it uses) or "EIO" (writes and fsyncs of the files kept failing)."""
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="namesrv-crash-"))
    if fault == "ENOSPC":
        with tiny_disk(workdir / "data"):
            return _run(iterations, max_seconds, workdir, seed, kill_after, window, progress, fault)
    return _run(iterations, max_seconds, workdir, seed, kill_after, window, progress, fault)


def _run(iterations: int, max_seconds: float, workdir: Path, seed: int, kill_after: tuple[float, float],
         window: int, progress: bool, fault: str | None) -> Summary:
    rng = random.Random(seed)
    data_dir = workdir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "namesrv.properties").touch()
    args = ["-c", str(data_dir / "namesrv.properties"), "--kv-config-path", str(data_dir / "kvConfig.json")]
    kv, config = Stream("kv"), Stream("config")
    summary = Summary(fault=fault)
    started = time.monotonic()
    deadline = started + max_seconds
    for iteration in range(iterations):
        if time.monotonic() > deadline:
            break
        log = workdir / f"server-{iteration % 3}.log"
        log.unlink(missing_ok=True)
        eio_flag = workdir / "eio-on"
        launcher = eio_launcher(eio_flag, data_dir) if fault == "EIO" else None
        server = NamesrvProcess(args, log, workdir, launcher=launcher)
        try:
            port = server.wait_ready()
        except ServerStartError as exc:
            summary.start_failures += 1
            summary.violations.append(f"iteration {iteration}: the server did not start on the files: {exc}")
            break
        kill_after_s = rng.uniform(*kill_after)
        squeezer: Squeezer | None = None
        if fault == "ENOSPC":
            squeezer = DiskSqueezer(data_dir, rng.randrange(1 << 30))
        elif fault == "EMFILE":
            squeezer = FdSqueezer(server.proc.pid, rng.randrange(1 << 30))
        elif fault == "EIO":
            squeezer = EioSqueezer(eio_flag, rng.randrange(1 << 30))
        killed_after = asyncio.run(one_iteration(port, kv, config, window, kill_after_s, server, deadline, squeezer))
        summary.squeezes += squeezer.squeezes if squeezer else 0
        summary.kill_after_ms.append(round(killed_after * 1000, 1))
        check_files(data_dir, kv, config, summary, iteration)
        summary.iterations += 1
        if progress and summary.iterations % 50 == 0:
            print(f"[{time.monotonic() - started:7.1f} s] {summary.iterations} kills, {kv.acks:,} KV and "
                  f"{config.acks:,} config writes acknowledged, {len(summary.violations)} violations", flush=True)
    summary.kv_acks, summary.config_acks = kv.acks, config.acks
    summary.kv_errors, summary.config_errors = kv.errors, config.errors
    summary.config_unsaved = config.unsaved
    summary.leftover_temp_files = len(list(data_dir.glob("*.tmp")) + list(data_dir.glob(".*.tmp")))
    summary.seconds = round(time.monotonic() - started, 1)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--max-seconds", type=float, default=3600)
    parser.add_argument("--kill-after-max", type=float, default=0.3,
                        help="kill up to this many seconds after the first acknowledgements (uniform)")
    parser.add_argument("--window", type=int, default=8, help="writes in flight per client")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--workdir", help="keep the data and logs here (default: a temp dir, removed)")
    parser.add_argument("--json", help="write the summary here as JSON")
    parser.add_argument("--fault", choices=["ENOSPC", "EMFILE", "EIO"], help="a disk kept filling up / an fd table "
                        "kept running full / a device kept failing while writing (the first two as root)")
    args = parser.parse_args()
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="namesrv-crash-"))
    try:
        summary = run(args.iterations, args.max_seconds, workdir, args.seed, (0.0, args.kill_after_max),
                      args.window, progress=True, fault=args.fault)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    brief = summary.brief()
    print("\n== crash-safety summary ==")
    print(f"iterations (SIGKILLs)   {summary.iterations} in {summary.seconds} s")
    print(f"acknowledged writes     {summary.kv_acks:,} PUT_KV_CONFIG, {summary.config_acks:,} UPDATE_NAMESRV_CONFIG")
    print(f"violations              {len(summary.violations)} (files that did not load or lost an acknowledged "
          f"write); start failures {summary.start_failures}")
    for line in summary.violations[:10]:
        print(f"    {line}")
    print(f"files behind last sent  KV median/max {brief['kv_lag_median_max']}, config median/max "
          f"{brief['config_lag_median_max']} (writes in flight when killed)")
    print(f"kill after first ack    median/max {brief['kill_after_ms_median_max']} ms")
    print(f"temp files left behind  {summary.leftover_temp_files}")
    if summary.fault:
        print(f"fault {summary.fault:<17} {summary.squeezes} squeezes; answered with an error: {summary.kv_errors} KV, "
              f"{summary.config_errors} config writes; config writes applied in memory only (save failed): "
              f"{summary.config_unsaved}")
    if args.json:
        Path(args.json).write_text(json.dumps(brief, indent=2))
    return 0 if not summary.violations and summary.iterations else 1


if __name__ == "__main__":
    sys.exit(main())
