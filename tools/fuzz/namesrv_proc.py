"""A NameServer as a child process on 127.0.0.1 (ephemeral port), for the fuzz and crash tools.

``NamesrvProcess`` starts ``python -m twisted_namesrv`` with its output in a log file, finds the
port it listens on in that log, reports whether it is alive and its RSS, stops it (SIGTERM, or
SIGKILL for the crash loop), and ``scan_log`` sums up what went wrong in a log: tracebacks
grouped by exception, Twisted "Unhandled Error"s, and the decode errors that closed connections.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
_ADDRESS = re.compile(rb"address 127\.0\.0\.1:(\d+)")


class ServerStartError(RuntimeError):
    """The server did not come up (its log says why)."""


class NamesrvProcess:
    def __init__(self, args: list[str], log_path: Path, cwd: Path, core: int | None = None,
                 python: str = sys.executable, launcher: list[str] | None = None) -> None:
        """``launcher``: what runs the server instead of ``python -m twisted_namesrv`` (eio_namesrv.py)."""
        self.log_path = log_path
        self.cmd = [*(launcher or [python, "-m", "twisted_namesrv"]), "--port", "0", "--bind", HOST, *args]
        if core is not None and _taskset():
            self.cmd = ["taskset", "-c", str(core), *self.cmd]
        env = dict(os.environ, HOME=str(cwd), PYTHONUNBUFFERED="1")
        env.pop("ROCKETMQ_HOME", None)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(self.cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.port = 0

    def wait_ready(self, timeout: float = 20.0) -> int:
        """The port, once the boot line is in the log; ServerStartError if it dies or is late."""
        deadline = time.monotonic() + timeout
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            seen = b""
            while True:
                seen += log.read()
                match = _ADDRESS.search(seen)
                if match:
                    self.port = int(match.group(1))
                    return self.port
                if self.proc.poll() is not None:
                    raise ServerStartError(f"server exited with {self.proc.returncode}: {seen[-2000:]!r}")
                if time.monotonic() > deadline:
                    self.kill()
                    raise ServerStartError(f"no boot line within {timeout} s: {seen[-2000:]!r}")
                time.sleep(0.003)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kib(self) -> int | None:
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return None
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        return int(match.group(1)) if match else None

    def kill(self) -> None:
        """SIGKILL, no goodbye: what the crash loop does."""
        if self.alive:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; SIGKILL if it does not stop.  Returns the exit status."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def _taskset() -> bool:
    return (os.cpu_count() or 1) > 1 and any(
        os.access(os.path.join(p, "taskset"), os.X_OK) for p in os.environ.get("PATH", "").split(os.pathsep))


@dataclass
class LogReport:
    #: (context, request code, innermost project frame, exception type) -> count, where context is
    #: "unhandled" (a Twisted Unhandled Error: the exception escaped the protocol), "handler" (the
    #: dispatcher caught a handler's exception and answered code 1) or "other"
    tracebacks: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # the same key -> one full exception line
    decode_closes: int = 0  # "decode exception ..., closing the channel"
    lines: int = 0

    def count(self, context: str) -> int:
        return sum(n for key, n in self.tracebacks.items() if key[0] == context)

    @property
    def unhandled(self) -> int:
        return self.count("unhandled")

    @property
    def handler_failures(self) -> int:
        return self.count("handler")

    @property
    def traceback_count(self) -> int:
        return sum(self.tracebacks.values())

    def grouped(self) -> list[tuple[int, str]]:
        """(count, one line) per distinct traceback, most frequent first."""
        return [(n, f"{key[0]:9} code {key[1]:>5}  {key[3]} at {key[2]}  e.g. {self.examples[key]}")
                for key, n in self.tracebacks.most_common()]


_HANDLER = re.compile(r"process request (-?\d+) from .* failed")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def scan_log(path: Path, offset: int = 0) -> LogReport:
    """Read a server log (from ``offset``) and sort every traceback in it by where it came from.
    A chained traceback ("During handling of the above exception ...") counts once, by its last
    exception."""
    report = LogReport()
    context, code, where = "other", "-", "?"
    in_traceback = False
    pending: tuple | None = None  # the exception line just read; a chained traceback may follow

    def commit() -> None:
        nonlocal pending, context, code
        if pending is not None:
            key, example = pending
            report.tracebacks[key] += 1
            report.examples.setdefault(key, example)
            pending = None
            context, code = "other", "-"

    with open(path, "rb") as log:
        log.seek(offset)
        for raw in log:
            report.lines += 1
            line = raw.decode("utf-8", "replace").rstrip("\n")
            body = line.lstrip("\t")
            if pending is not None:
                if not body.strip():
                    continue
                if body.startswith(("During handling", "The above exception")):
                    pending = None  # the chained traceback that follows is the one counted
                    continue
                commit()
            if "decode exception from" in line:
                report.decode_closes += 1
            if not in_traceback:
                if "Unhandled Error" in line:
                    context, code = "unhandled", "-"
                elif match := _HANDLER.search(line):
                    context, code = "handler", match.group(1)
                if "Traceback (most recent call last)" in line:
                    in_traceback, where = True, "?"
                continue
            if match := _FRAME.search(body):
                if "/twisted_namesrv/" in match.group(1):
                    where = f"{match.group(1).split('/twisted_namesrv/')[-1]}:{match.group(2)} {match.group(3)}"
                continue
            if body.startswith(" ") or not body.strip() or body.startswith(("--- <exception caught here>",
                                                                            "Traceback")):
                continue
            pending = ((context, code, where, body.split(":", 1)[0].removeprefix("builtins.")), body[:160])
            in_traceback = False
        commit()
    return report
