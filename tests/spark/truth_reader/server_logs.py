"""The NameServer's own log as the witness of what it did: Java's namesrv.log or twisted-namesrv's log.

Each reader turns its lines into (UTC time, line) and knows the line that proves each kind of event:
a broker registered, unregistered, closed by the broker, dropped after its silence (Java: the idle close
"NETTY SERVER PIPELINE: IDLE exception" or the scan's "The broker channel expired"; ours: "broker idle"
or "broker expired"), a topic deleted (Java logs none), a broker's write permission wiped or given back
(both log how many of its topics the change touched: the topics the server held for it then), the
server started.  The builder looks for the
line near the time the packets say and prints a PROBLEM when there is none: the two must agree.

- Java 4.9.8 / 5.3.3 (logback): ``2026-11-28 13:28:20 INFO main - ...``; the JVM's default zone on the
  rig was UTC+08:00; seconds only.
- twisted-namesrv (its default text lines, twisted.logger):
  ``2026-11-28T09:02:32+0000 [twisted_namesrv.housekeeping#info] broker registered: cluster=... addr=...``;
  the offset is in the line; seconds only.  Its JSON lines (``--log-format json``) carry ``time`` the same way
  and are read too.
"""
from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from pathlib import Path

JAVA_ZONE = dt.timedelta(hours=8)  # the Java logs' clock on the rig: UTC+08:00

_JAVA_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_OUR_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?[+-]\d{4}) \[")

#: a loopback client as Java names it: 127.0.0.1, or ::1 as Java writes an IPv6 address (in full, bracketed:
#: "[0:0:0:0:0:0:0:1]", as InetSocketAddress prints it since Java 14)
LOOPBACK = r"(?:127\.0\.0\.1|\[0:0:0:0:0:0:0:1\])"

# event -> the line that proves it; {addr} is the broker's address, {port} the client port of its
# connection, {topic} a topic (re.escape'd before use)
JAVA = {
    "register": r"new broker registered.*{addr}",
    "unregister": r"unregisterBroker, remove from brokerLiveTable OK",
    "closed_by_broker": r"channel destroyed|channelInactive, the channel\[" + LOOPBACK + r":{port}\]",
    "expired": r"IDLE exception \[" + LOOPBACK + r":{port}\]|The broker channel expired",
    "expired_by_scan": r"The broker channel (\S+ )?expired",
    "write_perm": r"{op} write perm of broker\[{broker}\], client: \S+, \d+\s*$",
    # every channel it accepted, named by the client's address as it saw it ({client}: "" for any)
    "channel_active": r"NETTY SERVER PIPELINE: channelActive, the channel\[{client}",
    # 5.3.3 listens (RemotingServer started) before it logs boot success: a run stopped at once logs only the first
    "start": r"The Name Server boot success|RemotingServer started, listening",
}
OURS = {
    "register": r"broker registered: .*\baddr={addr}(\s|$)",
    "unregister": r"broker unregistered: .*\baddr={addr}(\s|$)",
    "closed_by_broker": r"broker closed: .*\baddr={addr}(\s|$)",
    "expired": r"broker (idle|expired): .*\baddr={addr}(\s|$)",
    "expired_by_scan": r"broker expired: .*\baddr={addr}(\s|$)",
    "delete_topic": r"audit delete_topic DELETE_TOPIC_IN_NAMESRV\(216\) .*\btopic={topic}(\s|$).*-> ok",
    "write_perm": r"{op} write perm of broker\[{broker}\], client: \S+, \d+\s*$",
    "start": r"The Name Server boot success",
    "stop": r"Received SIG(TERM|INT), shutting down",
    # a plain peer refused at a TLS-enforcing port: the first of each host is logged, later ones counted
    "not_tls": r"refused on remoting from {client}\S*: a plain \(non-TLS\) peer",
}


@dataclass
class ServerLog:
    """The lines of one or more logs of one kind, in time order."""

    flavor: str  # "java", "ours" or "none" (no NameServer's log: it knows no event, finds no line)
    lines: list[tuple[float, str]]

    @property
    def patterns(self) -> dict[str, str]:
        return {} if self.flavor == "none" else OURS if self.flavor == "ours" else JAVA

    def knows(self, event: str) -> bool:
        """Whether this server logs that kind of event at all (Java logs no topic deletion)."""
        return event in self.patterns

    def find(self, event: str, near: float | None = None, within: float = 3.0,
             **values: str) -> list[tuple[float, str]]:
        """The lines proving ``event`` (about ``values``), within ``within`` s before ``near`` to
        ``within`` + 1 s after it (the log has whole seconds)."""
        if not self.knows(event):
            return []  # (no log: every event the packets show that needs a line is then a PROBLEM)
        rx = re.compile(self.patterns[event].format(**{k: re.escape(v) for k, v in values.items()}))
        hits = [(t, line) for t, line in self.lines if rx.search(line)]
        if near is not None:
            hits = [(t, line) for t, line in hits if -within <= t - near <= within + 1]
        return hits

    def message(self, line: str) -> str:
        """The line without its time and logger, for quoting in TRUTH.json."""
        if self.flavor == "ours":
            return line.split("] ", 1)[-1]
        return line[20:]


def flavor_of(text: str) -> str:
    for line in text.splitlines():
        if _OUR_TIME.match(line) or line.startswith("{"):
            return "ours"
        if _JAVA_TIME.match(line):
            return "java"
    raise ValueError("no timestamped line: neither a Java nor a twisted-namesrv log")


def parse_lines(text: str, flavor: str) -> list[tuple[float, str]]:
    """(UTC seconds, line) of every timestamped line."""
    out = []
    for line in text.splitlines():
        if flavor == "java":
            m = _JAVA_TIME.match(line)
            if m:
                local = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
                out.append(((local - JAVA_ZONE).timestamp(), line))
        elif line.startswith("{"):
            record = json.loads(line)
            out.append((_our_time(record["time"]), f"{record['time']} [{record.get('namespace', '-')}] "
                                                   f"{record.get('text', record.get('message', ''))}"))
        else:
            m = _OUR_TIME.match(line)
            if m:
                out.append((_our_time(m.group(1)), line))
    return out


def _our_time(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z" if "." in text else "%Y-%m-%dT%H:%M:%S%z").timestamp()


def load(paths: list[Path]) -> ServerLog:
    """The logs of one scenario (all of one kind), merged in time order; none given: the "none" log
    (a capture in which no NameServer ran, e.g. a web server on its port: the steps are the witness)."""
    if not paths:
        return ServerLog("none", [])
    flavors, lines = set(), []
    for path in paths:
        text = path.read_text(errors="replace")
        flavor = flavor_of(text)
        flavors.add(flavor)
        lines += parse_lines(text, flavor)
    if len(flavors) != 1:
        raise ValueError(f"logs of different servers in one scenario: {sorted(flavors)}")
    lines.sort()
    return ServerLog(flavors.pop(), lines)
