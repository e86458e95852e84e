"""Log output: Twisted's text lines by default, or one JSON object per line for log shippers.

    python -m twisted_namesrv --log-format json ...
    twistd --logger twisted_namesrv.logs.json_lines -n namesrv ...

Each line carries the time, level, namespace and formatted message, plus the event's own
fields: ``route_event`` and ``route_info`` (cluster, broker, id, addr, topics or reason) for
every broker registered, changed, confirmed, expired, closed or unregistered, and ``peer``,
``detail`` and ``rejected`` (the reason) for every rejected frame.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import IO, Any

from twisted.logger import FileLogObserver, ILogObserver, Logger, LogLevel, formatEvent, formatTime, textFileLogObserver

FORMATS = ("text", "json")


def event_as_json_line(event: dict[str, Any]) -> str:
    record = {k: v for k, v in event.items() if not k.startswith("log_") and k not in ("format", "message", "time")}
    record.update(time=formatTime(event.get("log_time")), level=event["log_level"].name,
                  namespace=event.get("log_namespace"), message=formatEvent(event))
    return json.dumps(record, default=repr) + "\n"


def json_lines(out: IO[str] | None = None) -> ILogObserver:
    """An observer writing JSON lines to ``out`` (stdout); also twistd's ``--logger`` factory."""
    return FileLogObserver(out or sys.stdout, event_as_json_line)


def observer(log_format: str, out: IO[str] | None = None) -> ILogObserver:
    return json_lines(out) if log_format == "json" else textFileLogObserver(out or sys.stdout)


_LEVELS = {logging.DEBUG: LogLevel.debug, logging.INFO: LogLevel.info, logging.WARNING: LogLevel.warn,
           logging.ERROR: LogLevel.error, logging.CRITICAL: LogLevel.critical}


class _ToTwisted(logging.Handler):
    """The dispatch layer logs with the standard library (it imports no Twisted); its records
    join the server's own log, with their logger name as namespace."""

    def emit(self, record: logging.LogRecord) -> None:
        level = _LEVELS.get(record.levelno, LogLevel.info)
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        Logger(namespace=record.name).emit(level, "{text}", text=text)


def forward_stdlib_logging() -> None:
    """Once per process: twisted_namesrv's standard-library records go to twisted.logger."""
    package = logging.getLogger("twisted_namesrv")
    if not any(isinstance(h, _ToTwisted) for h in package.handlers):
        package.addHandler(_ToTwisted())
        package.setLevel(logging.INFO)
