"""Log output: Twisted's text lines by default, or one JSON object per line for log shippers,
every control character a peer put in a field shown as an escape in both (one event, one line);
to stdout, or to a file that rotates by size (keeping the last few, as Java's logback does) or daily;
events below a level left out.  The same options for every launcher:

    python -m twisted_namesrv --log-format json --log-file ~/logs/rocketmqlogs/namesrv.log ...
    twistd -n --pidfile= namesrv --log-file namesrv.log --log-rotate daily --log-level warn ...

Each line carries the time, level, namespace and formatted message, plus the event's own
fields: ``route_event`` and ``route_info`` (cluster, broker, id, addr, topics or reason) for
every broker registered, changed, confirmed, expired, closed or unregistered, and ``peer``,
``detail`` and ``rejected`` (the reason) for every rejected frame; every refusal (refusals.py) has
``listener``, ``peer`` and ``refused`` (the reason).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import io
import json
import math
import os
import re
import signal
import stat
import sys
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from twisted.logger import (
    ILogObserver,
    Logger,
    LogLevel,
    eventAsText,
    formatEvent,
    formatTime,
)
from twisted.python import logfile
from twisted.python.compat import ioType
from zope.interface import implementer

from .escapes import escaped
from .state.files import errno_name

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warn", "error", "critical")
#: Java's namesrv.log rolls at 128 MB and keeps 10 (rmq.namesrv.logback.xml)
DEFAULT_ROTATE = "128MB"
DEFAULT_KEEP = 10
_SIZE = re.compile(r"(\d+)\s*(|K|M|G)B?", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


class LogOptionError(ValueError):
    """A log option that cannot be used; the message names the option."""


def rotation(text: str) -> int | None:
    """``--log-rotate``: ``daily`` (None) or a size such as ``128MB``, ``500K``, ``1G`` (bytes)."""
    if text.strip().lower() == "daily":
        return None
    found = _SIZE.fullmatch(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise LogOptionError(f"--log-rotate: {text!r} is neither 'daily' nor a size such as 128MB")
    return int(found.group(1)) * _UNITS[found.group(2).lower()]


class WholeWrites:
    """A log file's raw file whose ``write`` writes all it is given or raises: Twisted's log files
    write through an unbuffered file and drop a short write's count, so a disk that filled up in the
    middle of a line kept the line's start and glued the next line to it (a JSON line no shipper can
    read).  A line cut so is ended by the next write, which starts with a newline."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.cut = False
        #: the raw file's own flush (nothing is held here), found at once: every log line is flushed,
        #: and a name only ``__getattr__`` finds fails the usual look-up first (an AttributeError made
        #: and dropped, then a Python call): a few thousand instructions a line, a registration's
        self.flush: Callable[[], object] = raw.flush

    @property
    def closed(self) -> bool:
        """The raw file's (_Whole.write asks before every line of a log file): as ``flush``."""
        return bool(self.raw.closed)

    def write(self, data: bytes | str) -> int:
        if isinstance(data, str):
            data = data.encode("utf-8")
        if self.cut:
            data = b"\n" + data
        done = 0
        while done < len(data):
            try:
                written = self.raw.write(data[done:])
                if not written:  # None: a non-blocking stdout's pipe is full (trying again would spin)
                    raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            except OSError:
                self.cut = self.cut or done > 0
                raise
            done += written
            self.cut = False
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class _Whole:
    """Twisted's log file with its file's writes whole (WholeWrites), on every file it opens, in
    append mode: logrotate's ``copytruncate`` empties the file under the server, and Twisted's file
    (opened ``rb+``, sought to its end) wrote the next line at the old offset, the file then starting
    with a hole of NUL bytes as long as the log had been; with O_APPEND each line goes at the end."""

    _file: Any
    path: str
    #: the clock the moved-file check is paced on (a test's own)
    monotonic: Callable[[], float] = staticmethod(time.monotonic)
    #: seconds between two looks at whether the path still names the open file
    MOVED_CHECK_SECONDS = 1.0
    _checked_at = -math.inf

    def _openFile(self) -> None:
        if "_threadable_lock" not in self.__dict__:
            # Twisted's lock of write and rotate (threadable.synchronize) is threading's Python RLock
            # (an XLock, picklable): two Python calls a line, one a registration; C's RLock is the
            # same lock, reentrant, taken and released in C (a log file is never pickled)
            self.__dict__["_threadable_lock"] = threading.RLock()
        super()._openFile()  # type: ignore[misc]
        self._checked_at = self.monotonic()
        descriptor = self._file.fileno()
        fcntl.fcntl(descriptor, fcntl.F_SETFL, fcntl.fcntl(descriptor, fcntl.F_GETFL) | os.O_APPEND)
        self._file = WholeWrites(self._file)
        self._file.cut = _ends_mid_line(descriptor)

    def reopen(self) -> None:
        """The file at the path opened again (SIGUSR1: reopen_on_usr1).  Twisted's reopen deletes its
        file before opening the new one, so an open that failed left none (every later line an
        AttributeError nobody counted); here the closed one stays, opened again at the next line."""
        self._file.close()
        self._openFile()

    def write(self, data: str | bytes) -> None:
        """Twisted's rotate closes the file, renames it, then opens a new one; when that open failed
        (no descriptor left, the directory read-only) every later line went to the closed file, a
        ValueError nobody counted, the log lost until a restart: the file is opened again first."""
        if self._file.closed:
            self._openFile()  # still failing: an OSError, the line lost and counted (LineWriter)
        elif self._moved():
            self.reopen()
        super().write(data)  # type: ignore[misc]

    def _moved(self) -> bool:
        """Whether the file was renamed or deleted under the server, looked at once a second at most:
        logrotate's ``create`` without its ``postrotate`` (or a SIGUSR1 that never came: a
        ``pkill`` pattern that missed, a unit renamed) left the server writing to namesrv.log.1 for
        good, and once ``compress`` deleted that, to a deleted file whose space no ``df`` could find
        and whose lines nobody could read.  The lines of the second before the look go to the old file.
        Here, not on a timer the composition root wires: between looks it costs a line one Python call
        and a clock read of the 26 calls a line's write makes (cProfile, 20,000 writes), a timer would
        cost the reactor a call every second idle or not, and its reopen, in the reactor's thread, would
        race a line written in another (Twisted's logger takes any thread's): here the writer reopens its own."""
        now = self.monotonic()
        if now - self._checked_at < self.MOVED_CHECK_SECONDS:
            return False
        self._checked_at = now
        try:
            named, held = os.stat(self.path), os.fstat(self._file.fileno())
        except FileNotFoundError:
            return True
        except OSError:  # cannot look (a directory gone unreadable): as before, write on
            return False
        return (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino)


def _ends_mid_line(descriptor: int) -> bool:
    """Whether the file opened ends in the middle of a line: the run before this one cut its last line
    (the disk filled, then it stopped or was killed), and this run's first line would be glued to it
    (seen on a full tmpfs: "cannot save file /tmp/.../fu2026-12-01T02:34:47+0000 [-] RemotingFactory
    starting"); the first write then starts with a newline, as after a cut in this run."""
    try:
        size = os.fstat(descriptor).st_size
        return size > 0 and os.pread(descriptor, 1, size - 1) != b"\n"
    except OSError:  # not readable (opened for writing only): as before
        return False


class SizedLogFile(_Whole, logfile.LogFile):
    """Twisted's file that rotates past a size, keeping ``maxRotatedFiles``, written whole."""

    def shouldRotate(self) -> bool:
        """Past the size by Twisted's count of what it wrote, and by the file's own size (one fstat
        then, not at every line): a file a copytruncate emptied since is not rotated."""
        if not super().shouldRotate():
            return False
        self.size = os.fstat(self._file.fileno()).st_size
        return bool(super().shouldRotate())


class DailyLogFile(_Whole, logfile.DailyLogFile):
    """Twisted's daily file (``namesrv.log.2026_11_26``), keeping only the newest ``keep`` old ones."""

    def __init__(self, name: str, directory: str, keep: int) -> None:
        self.keep = keep
        super().__init__(name, directory)

    def rotate(self) -> None:
        super().rotate()
        old = sorted(Path(self.directory).glob(self.name + ".*"), key=lambda p: p.stat().st_mtime)
        for stale in old[:max(0, len(old) - self.keep)]:
            stale.unlink(missing_ok=True)


def open_log_file(path: str, rotate: str = DEFAULT_ROTATE, keep: int = DEFAULT_KEEP) -> logfile.BaseLogFile:
    """The file, its directory created; LogOptionError names what cannot be had."""
    size = rotation(rotate)
    target = Path(path).expanduser().absolute()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if size is None:
            return DailyLogFile(target.name, str(target.parent), keep)
        return SizedLogFile(target.name, str(target.parent), rotateLength=size, maxRotatedFiles=keep)
    except OSError as exc:
        raise LogOptionError(f"--log-file: cannot write {target}: {exc.strerror}") from None


def reopen_on_usr1(reactor: Any, writer: Any) -> bool:
    """From now on SIGUSR1 reopens the log file ``writer`` (a LineWriter) writes to, in the reactor's
    thread: logrotate's ``create`` renames the file and makes a new one, and its ``postrotate``
    sends SIGUSR1 (as nginx and syslog daemons take it).  Before, Python's default action for SIGUSR1
    ended the server at once, no clean stop, no line.  Logging to stdout (the journal) there is
    nothing to reopen: one line says so.  Not installed when SIGUSR1 is not at its default (ignored
    at start, or a program embedding the server handles it); whether it was installed."""
    out = getattr(writer, "out", None)

    def reopen() -> None:
        if not isinstance(out, logfile.BaseLogFile):
            _log.info("Received SIGUSR1: the log goes to standard output, no file to reopen")
            return
        try:
            out.reopen()
        except OSError as exc:  # the next line opens it again (_Whole.write), or is counted lost
            _log.error("Received SIGUSR1: cannot reopen the log file {path}: {error}", path=out.path,
                       error=exc.strerror or str(exc))
            return
        _log.info("Received SIGUSR1, log file reopened: {path}", path=out.path)

    return _on_usr1(reactor, reopen)


def usr1_not_ours(reactor: Any, whose: str) -> bool:
    """From now on SIGUSR1 is one line, the server going on, when twistd logs through the operator's
    own ``whose`` (``--logger NAME``, ``--syslog``: launch.take_over_twistd_logging): the server writes
    no file of its own to reopen, and twistd installs its rotation on SIGUSR1 only for its own
    observer, so Python's default action ended the server there (logrotate's ``postrotate`` a crash).
    The same rules as reopen_on_usr1: not installed when SIGUSR1 is not at its default (the
    operator's logger installed its own handler); whether it was installed."""
    def say() -> None:
        _log.info("Received SIGUSR1: the log is written by twistd's {whose}, not by the server: nothing "
                  "reopened (the server's own --log-file is reopened on SIGUSR1)", whose=whose)

    return _on_usr1(reactor, say)


def _on_usr1(reactor: Any, act: Callable[[], None]) -> bool:
    """``act`` on each SIGUSR1, in the reactor's thread, when SIGUSR1 is at its default or held
    since the start (hold_usr1_at_start: one that came meanwhile is acted on now, once); else none
    installed, whoever set it keeps it; whether it was installed."""
    held = signal.getsignal(signal.SIGUSR1)
    if held is not signal.SIG_DFL and not isinstance(held, UsrOneHeld):
        return False
    signal.signal(signal.SIGUSR1, lambda number, frame: reactor.callFromThread(act))
    if isinstance(held, UsrOneHeld) and held.received:
        reactor.callFromThread(act)
    return True


class UsrOneHeld:
    """SIGUSR1's handler from the start of a launcher until its own (reopen_on_usr1, usr1_not_ours)
    is installed once the log is set up: it only counts.  Python's default action for SIGUSR1 ends
    the process at once, and the start can take seconds (the config and every store read, the
    ports bound) before the reactor runs: logrotate's ``postrotate`` in that window ended a
    restarting server, no line, the supervisor's next restart the only trace.

    Falsy, as SIG_DFL (0) is: twistd's own file observer, and an operator's ``--logger`` factory
    made as it is, install their SIGUSR1 handler only "over None or SIG_DFL" (``not
    signal.getsignal(...)``), which the start's hold must not stop."""

    def __init__(self) -> None:
        self.received = 0

    def __call__(self, number: int, frame: Any) -> None:
        self.received += 1

    def __bool__(self) -> bool:
        return False


def hold_usr1_at_start() -> bool:
    """From now on until the launcher's own handler is installed, SIGUSR1 is held (UsrOneHeld), not
    Python's default that ends the process; only when SIGUSR1 is at its default (ignored at start,
    or handled by a program embedding the server: left as it is); whether it was held."""
    if signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGUSR1, UsrOneHeld())
    return True


_log = Logger()


def configured_observer(log_format: str = "text", path: str | None = None, rotate: str = DEFAULT_ROTATE,
                        keep: int = DEFAULT_KEEP, level: str = "info") -> LevelFiltered:
    """What the command line asked for: the format, to stdout or a rotated file, from ``level`` up."""
    if level not in LEVELS:
        raise LogOptionError(f"--log-level: {level!r} is not one of {', '.join(LEVELS)}")
    out: Any = open_log_file(path, rotate, keep) if path else None
    return LevelFiltered(observer(log_format, out), LogLevel.levelWithName(level))


@implementer(ILogObserver)
class LevelFiltered:
    """``observer`` for the events from ``level`` up: Twisted's FilteringLogObserver with a
    LogLevelFilterPredicate of one default level (the only one ``--log-level`` sets), as one look
    in a set.  Twisted's pair looks the event's namespace up segment by segment, compares the
    levels in Python (constantly's ``__lt__``) and the predicate's answer with three constants, at
    every event: every broker's registration is a line, and that was a third of logging it.  As
    Twisted's, an event without a level or a namespace is left out."""

    def __init__(self, observer: ILogObserver, level: Any) -> None:
        self.observer = observer
        self.levels = frozenset(known for known in LogLevel.iterconstants() if not known < level)

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("log_level") in self.levels and event.get("log_namespace"):
            self.observer(event)


def emit_made(logger: Logger, level: Any, text: str, **fields: Any) -> None:
    """``logger.emit(level, TEXT_AS_IS, log_text=text, **fields)`` for a message made whole and a
    level that is one of LogLevel's: the same event to the same observer, without Logger.emit's
    check of the level (constantly sorts every LogLevel at each call: a sixth of emitting a route
    event, one a registration)."""
    emit_fields(logger, level, text, fields)


def emit_fields(logger: Logger, level: Any, text: str, fields: dict[str, Any]) -> None:
    """``emit_made`` of ``fields``, a dict the caller made for the event and hands over (the event
    is made of it, no keyword arguments packed and copied: a route event's line, one a registration)."""
    fields["log_text"], fields["log_logger"], fields["log_level"] = text, logger, level
    fields["log_namespace"], fields["log_source"], fields["log_format"] = logger.namespace, logger.source, TEXT_AS_IS
    fields["log_time"] = time.time()
    logger.observer(fields)


#: the format of an event whose message its emitter made whole (Twisted's legacy events, the route
#: events: housekeeping.log_route_event): written as it is, without running the format
TEXT_AS_IS = "{log_text}"


def _made_whole(event: dict[str, Any]) -> str | None:
    """The event's ``log_text`` when that is its whole format (TEXT_AS_IS), else None."""
    text = event.get("log_text")
    return text if event.get("log_format") == TEXT_AS_IS and isinstance(text, str) else None


def message_of(event: dict[str, Any]) -> str:
    """The event's message: its ``log_text`` when that is its whole format, else Twisted's formatEvent."""
    text = _made_whole(event)
    return formatEvent(event) if text is None else text


def event_as_json_line(event: dict[str, Any]) -> str:
    """One JSON object: the event's own fields, time, level, namespace and message; json.dumps
    writes every control character and lone surrogate of them as an escape (ensure_ascii)."""
    record = {k: v for k, v in event.items() if not k.startswith("log_") and k not in ("format", "message", "time")}
    record.update(time=format_time(event.get("log_time")), level=event["log_level"].name,
                  namespace=event.get("log_namespace"), message=message_of(event))
    return json.dumps(record, default=repr) + "\n"


def json_lines(out: IO[str] | None = None) -> LineWriter:
    """An observer writing JSON lines to ``out`` (stdout); also twistd's ``--logger`` factory."""
    return _line_writer(out, event_as_json_line)


def event_as_text_line(event: dict[str, Any]) -> str | None:
    """Twisted's classic text line (``time [namespace#level] message``) with every control character
    of the message shown as an escape (escapes.py, the terminal's rule): whatever a peer put in a
    broker, topic or KV name, an accessKey or a config value -- ESC, CR, a newline, a lone surrogate
    -- the event is one line, and one that can be written (a lone surrogate cannot be encoded: the
    line was lost).  A traceback follows on lines of its own, each indented by a tab as Twisted's.
    An event without one is formatted once (every broker's registration is a line: at 5,000
    brokers a second formatting was a tenth of a registration's CPU); a message made whole
    (``TEXT_AS_IS``) is written as Twisted's eventAsText would, without running its format."""
    text = event.get("log_text")  # _made_whole's rule, without its call (a line per registration)
    if (text and event.get("log_format") == TEXT_AS_IS and isinstance(text, str) and "log_failure" not in event
            and "log_system" not in event):
        level = event.get("log_level")
        line = (f"{format_time(event.get('log_time'))} [{event.get('log_namespace', '-')}#"
                f"{'-' if level is None else level.name}] {text}")
        # escaped's own first look, made here: most lines have nothing to escape
        return (line if line.isascii() and line.isprintable() else escaped(line)) + "\n"
    head = eventAsText(event, includeTraceback=False, formatTime=format_time)
    if "log_failure" not in event:
        return escaped(head) + "\n" if head else None
    whole = eventAsText(event, formatTime=format_time)
    if not whole:
        return None
    if head and whole.startswith(head):
        rest = whole[len(head):]
    else:  # an empty message before a traceback
        head, _, rest = whole.partition("\n")
        rest = "\n" + rest
    return "\n\t".join(escaped(line) for line in [head, *rest.split("\n")[1:]]) + "\n"


class _SecondsText:
    """Twisted's ``formatTime`` (RFC 3339 to the second, the local offset), worked out once a second:
    its text changes only when the whole second does (an offset changes on a whole second too), and
    working it out (two datetimes and a strftime) was the costliest part of a line."""

    def __init__(self) -> None:
        self.last: tuple[int, str] | None = None  # one tuple: a line logged from a thread reads it whole

    def __call__(self, when: float | None) -> str:
        if when is None:
            return formatTime(None)
        second, last = math.floor(when), self.last
        if last is None or last[0] != second:
            last = self.last = (second, formatTime(second))
        return last[1]


#: the time of every line, text or JSON
format_time = _SecondsText()


def text_lines(out: IO[str] | None = None) -> LineWriter:
    """An observer writing escaped text lines (event_as_text_line) to ``out`` (stdout)."""
    return _line_writer(out, event_as_text_line)


def _line_writer(out: IO[str] | None, format_event: Callable[[dict[str, Any]], str | None]) -> LineWriter:
    """A writer to ``out``, or to stdout: through a thread of its own when stdout may block (not a file)."""
    if out is not None:
        return LineWriter(out, format_event)
    stdout = standard_output()
    return LineWriter(stdout, format_event, held=HELD_BYTES if _may_block(stdout) else 0)


def _may_block(stdout: Any) -> bool:
    """Whether writing to ``stdout`` can wait for a reader: a pipe, a socket, a terminal; not a file."""
    try:
        return not stat.S_ISREG(os.fstat(stdout.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # a test's capture, none at all
        return False


def standard_output() -> Any:
    """Where a log without a file goes: stdout's descriptor, unbuffered and written whole (a line
    the disk refused is lost, not kept in a buffer to come out later under a count of lost lines);
    ``sys.stdout`` itself when it has no descriptor (a test's capture); none at all (started with
    stdout closed, ``>&-``: Python's sys.stdout is None) is a file that refuses every line, so the
    lines are counted and stderr says so once, as for a full disk."""
    if sys.stdout is None:
        return _NoStdout()
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.stdout
    sys.stdout.flush()
    try:
        return WholeWrites(open(descriptor, "wb", buffering=0, closefd=False))  # noqa: SIM115 - stdout's, kept open
    except OSError:  # the descriptor closed since Python started
        return _NoStdout()


class _NoStdout:
    """Stdout when the process has none: every write refused as writing to a closed descriptor is."""

    def write(self, data: bytes) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    def flush(self) -> None:
        pass


#: bytes of lines a log to a pipe, a socket or a terminal holds while its reader is not reading
#: (LineWriter's ``held``): about 5,000 lines, a few seconds of a registration storm
HELD_BYTES = 1 << 20
#: seconds the process waits at exit for held lines to reach a reader that is not reading
DRAIN_AT_EXIT = 5.0


@implementer(ILogObserver)
class LineWriter:
    """Twisted's FileLogObserver (each event one formatted line, written and flushed), for a log
    whose disk can fill up or fail: a line that cannot be written is counted, not raised into
    Twisted's log publisher (which only set the observer aside for that one event, so every line
    was lost without a trace).  The first failure of a run is one line on stderr; once lines can be
    written again, one warning line says how many were lost, between when and when, and why,
    before the next line: the log then shows its own gap.  ``lost`` counts every line lost, by
    errno name.

    With ``held`` (bytes; stdout a pipe, a socket or a terminal: standard_output) the lines are
    written by a thread of the writer's own: such a stdout blocks the writer while its reader is not
    reading (``| less`` paused, a stuck journald, a terminal's Ctrl-S), and the reactor's thread,
    every broker and client with it, waited in write().  The reactor's thread hands a line over; a
    line past ``held`` bytes waiting is lost, counted at once as EAGAIN (as a non-blocking pipe's
    full one), and its place among the lines handed over kept, where the thread opens the gap (and
    says the stderr line: stderr is often the same stuck pipe).  The lock guards the lines waiting
    and ``lost``, never a write; the gap is the writing thread's alone."""

    def __init__(self, out: Any, format_event: Callable[[dict[str, Any]], str | None],
                 warn: Callable[[str], object] | None = None, held: int = 0) -> None:
        self.out = out
        self.encoding = "utf-8" if ioType(out) is not str else None
        self.format_event = format_event
        self.warn = warn if warn is not None else _to_stderr
        self.lost: Counter[str] = Counter()
        self._gap: tuple[float, str, int] | None = None  # first failure's time, its reason, lines lost since
        self.held = held
        #: lines handed over and not yet written, and between them lines lost (when, reason, how many)
        self._waiting: deque[tuple[str, float | None] | _Lost] = deque()
        self._waiting_size = 0
        self._finished = False
        #: whether a line is flushed: not into a log file, which Twisted opens unbuffered (its flush
        #: does nothing, a Python call a line, one a registration), nor into stdout's descriptor
        #: opened unbuffered (standard_output: a raw file's flush does nothing either)
        self.flushes = not isinstance(out, _Whole) and not isinstance(getattr(out, "raw", None), io.FileIO)
        self._new_thread()

    def __call__(self, event: dict[str, Any]) -> None:
        text = self.format_event(event)
        if not text:
            return
        if self.held:
            self._hand_over(text, event.get("log_time"))
        else:
            self._write_line(text, event.get("log_time"))

    def _write_line(self, text: str, when: float | None) -> None:
        """The gap's line first when lines were lost, then ``text``; a line refused is lost, counted."""
        if self._gap is not None:
            notice = self.format_event(self._gap_event(when))
            failed = self._write(notice) if notice else None
            if failed is not None:
                self._lose(failed, when)
                return
            self._gap = None
        try:  # _write's, without its call (a line per registration)
            self.out.write(text if self.encoding is None else text.encode(self.encoding))
            if self.flushes:
                self.out.flush()
        except OSError as exc:
            self._lose(exc, when)

    def _write(self, text: str) -> OSError | None:
        """None once ``text`` is written, else why not."""
        try:
            self.out.write(text if self.encoding is None else text.encode(self.encoding))
            self.out.flush()
        except OSError as exc:
            return exc
        return None

    def _lose(self, failed: OSError, when: float | None) -> None:
        name = errno_name(failed)
        with self._lock:
            self.lost[name] += 1
        self._gap_grows(_Lost(when, f"{name}: {failed.strerror or failed}", 1))

    def _gap_grows(self, lost: _Lost) -> None:
        if self._gap is not None:
            since, reason, count = self._gap
            self._gap = (since, reason, count + lost.lines)
            return
        self._gap = (lost.when if lost.when is not None else time.time(), lost.reason, lost.lines)
        self.warn(f"namesrv: warning: cannot write the log ({lost.reason}): its lines are counted until it can, "
                  "then one line says how many were lost\n")

    def _gap_event(self, now: float | None) -> dict[str, Any]:
        assert self._gap is not None
        since, reason, count = self._gap
        until = now if now is not None else time.time()
        return {"log_level": LogLevel.warn, "log_namespace": __name__, "log_time": until, "log_format": TEXT_AS_IS,
                "log_text": f"{count} log lines not written from {format_time(since)} to {format_time(until)} "
                            f"({reason})", "lines_lost": count}

    def _new_thread(self) -> None:
        """A new lock and no thread yet (one starts with the first line handed over): at start, and
        in a forked child (twistd's daemon), where the parent's thread is gone and its lock may be
        held for good; the lines waiting in the parent are written by the child."""
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def _hand_over(self, text: str, when: float | None) -> None:
        if self._pid != os.getpid():
            self._new_thread()
        with self._ready:
            if self._waiting_size + len(text) <= self.held:
                self._waiting.append((text, when))
                self._waiting_size += len(text)
            else:
                self.lost["EAGAIN"] += 1
                last = self._waiting[-1] if self._waiting else None
                if isinstance(last, _Lost):
                    last.lines += 1
                else:
                    self._waiting.append(_Lost(when, f"EAGAIN: the log's reader is not reading, {self.held} "
                                                     "bytes of lines wait", 1))
            self._ready.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_handed, name="namesrv-log", daemon=True)
            self._thread.start()
            atexit.register(self.finish)
            _handing_over.add(self)

    def _write_handed(self) -> None:
        """The writer's thread: the lines handed over, in order, one at a time."""
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._waiting)
                first = self._waiting[0]
            if isinstance(first, _Lost):
                with self._ready:  # the reactor's thread may add to it until it leaves the queue
                    self._waiting.popleft()
                self._gap_grows(first)
                continue
            self._write_line(*first)
            with self._ready:
                self._waiting.popleft()
                self._waiting_size -= len(first[0])
                self._ready.notify_all()

    def finish(self, timeout: float = DRAIN_AT_EXIT) -> None:
        """At the stop, once the reactor has stopped: the lines handed over written (waiting at most
        ``timeout`` seconds), then every later line written at once by its caller.  twistd ends by
        the signal that stopped it (os.kill after the stop: no atexit), which lost the lines still
        waiting, its ``Server Shut Down.`` among them.  A reader that is not reading by then keeps
        the lines handed over: they are lost with the process."""
        if self._finished:  # once: at the reactor's stop, else at exit
            return
        self._finished = True
        if self.held and self.drained(timeout):
            self.held = 0

    def drained(self, timeout: float) -> bool:
        """Whether every line handed over was written (or lost), waiting at most ``timeout`` seconds
        (at the stop: finish)."""
        with self._ready:
            return self._ready.wait_for(lambda: not self._waiting, timeout)


#: the writers handing lines to a thread (finish_writers)
_handing_over: weakref.WeakSet[LineWriter] = weakref.WeakSet()


def finish_writers() -> None:
    """Every writer's LineWriter.finish: run once the reactor has stopped (launch.log_written_to_the_end)."""
    for writer in list(_handing_over):
        writer.finish()


@dataclass
class _Lost:
    """Lines lost from ``when`` for ``reason``, in their place among the lines a writer's thread writes."""

    when: float | None
    reason: str
    lines: int


def _to_stderr(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr on the same full disk, or closed: the gap line says it later


def observer(log_format: str, out: IO[str] | None = None) -> LineWriter:
    return json_lines(out) if log_format == "json" else text_lines(out)
