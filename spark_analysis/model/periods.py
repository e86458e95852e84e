"""Capture periods and the time bins over them, sessions cut where a file continues no connection
or where the NameServer restarted within a file, and the thresholds every layer above reads (the
NameServer's expiry, the report's plot sizes).

Pure: the driver computes the periods from the reading tasks' facts; the liveness walk and the
report read them.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from spark_analysis.model.sessions import FileSpans

#: a broker silent this long is removed by the NameServer (4.9.8's BROKER_CHANNEL_EXPIRED_TIME,
#: 5.x's default heartbeatTimeoutMillis); a gap over NEAR_EXPIRY_S up to it came close
EXPIRY_SECONDS = 120
NEAR_EXPIRY_S = EXPIRY_SECONDS // 2
#: files whose records are further apart than this are separate capture periods
PERIOD_GAP_S = 60.0
#: a NameServer going away closes every connection it holds within this long (a kill: the kernel
#: closes the process's sockets at once; a clean stop: Netty closes its channels)
SERVER_GONE_S = 1.0
#: the report's per-broker plots: at most this many brokers (those with findings first), over
#: about this many time bins of the capture periods
PLOTTED_BROKERS = 60
TIME_BINS = 800
#: the report's interval distributions: buckets this wide, the last one this many seconds and more
INTERVAL_BUCKET_S = 1
INTERVAL_RANGE_S = 300


class TimeBins(NamedTuple):
    """Time bins over the capture periods, never between them: each period gets a share of
    TIME_BINS by its length (at least one bin), of equal width within it."""

    starts: tuple[float, ...]
    ends: tuple[float, ...]
    first_bin: tuple[int, ...]  # and one more: the total
    widths: tuple[float, ...]
    #: per period: whether the NameServer ended it by going away and coming back (restarted_ends)
    restarted: tuple[bool, ...] = ()

    @classmethod
    def over(cls, periods: list[tuple[float, float]], restarted_at: frozenset[float] = frozenset()) -> TimeBins:
        """``restarted_at``: the ends of the periods the server ended by restarting."""
        periods = periods or [(0.0, 1.0)]
        total = sum(max(end - start, 1.0) for start, end in periods)
        counts = [max(1, round(TIME_BINS * max(end - start, 1.0) / total)) for start, end in periods]
        firsts = [0]
        for count in counts:
            firsts.append(firsts[-1] + count)
        return cls(tuple(s for s, _ in periods), tuple(e for _, e in periods), tuple(firsts),
                   tuple(max(end - start, 1.0) / count for (start, end), count in zip(periods, counts, strict=True)),
                   tuple(end in restarted_at for _, end in periods))

    def ended_by_restart(self, t: float) -> bool:
        """Whether ``t`` is within SERVER_GONE_S of the end of a period the server ended by
        restarting: the closes then are the server going away, not the brokers'."""
        period = self.period_of(t)
        return bool(self.restarted) and self.restarted[period] and t >= self.ends[period] - SERVER_GONE_S

    def period_of(self, t: float) -> int:
        return max(bisect.bisect_right(self.starts, t) - 1, 0)

    def of(self, t: float) -> int:
        period = self.period_of(t)
        within = int((t - self.starts[period]) // self.widths[period])
        return self.first_bin[period] + min(max(within, 0), self.first_bin[period + 1] - self.first_bin[period] - 1)

    def middle(self, index: int) -> float:
        """The middle time of a bin."""
        period = bisect.bisect_right(self.first_bin, index) - 1
        return self.starts[period] + (index - self.first_bin[period] + 0.5) * self.widths[period]


class ConnectionEnds(NamedTuple):
    """How one 4-tuple's segments start and end within one file: whether its first is a SYN (a
    connection opened there) and its last a FIN or RST (closed there); when its first FIN or RST
    was, and whether the server sent it (the server closed the connection)."""

    first: float
    opened: bool
    last: float
    closed: bool
    first_close: float | None = None
    server_closed: bool = False

    def merge(self, other: ConnectionEnds | None) -> ConnectionEnds:
        """The same 4-tuple in another byte range of the file: the earlier start, the later end,
        the earlier first close."""
        if other is None:
            return self
        start = self if self.first <= other.first else other
        end = self if self.last >= other.last else other
        closes = [ends for ends in (self, other) if ends.first_close is not None]
        close = min(closes, key=lambda ends: ends.first_close or 0.0) if closes else self
        return ConnectionEnds(start.first, start.opened, end.last, end.closed, close.first_close, close.server_closed)


def server_restarts(files: FileSpans, ends: dict[str, dict[tuple[str, str], ConnectionEnds]]) -> set[float]:
    """The first record times of files that start another server's story although they follow
    the file before within PERIOD_GAP_S: no TCP connection goes on from the one to the other (a
    4-tuple still open at the end of the first that the second carries on without a SYN). Rotated
    files of one capture share the brokers' long-lived connections; captures of another cluster,
    or of a NameServer started again, share none."""
    starts = set()
    for (_, last, before), (first, _, after) in zip(files, files[1:], strict=False):
        if first - last > PERIOD_GAP_S:
            continue
        earlier, later = ends.get(before, {}), ends.get(after, {})
        if not any(not earlier[key].closed and not later[key].opened for key in earlier.keys() & later.keys()):
            starts.add(first)
    return starts


def restarts_within(ends: dict[str, dict[tuple[str, str], ConnectionEnds]], server_port: int) -> dict[float, float]:
    """Where a NameServer restarted within one file: {when the new session starts: when the old
    one ended}. The evidence, per file and server endpoint (``ip:server_port``): a connection
    opened (SYN) at a moment no connection spans (every one seen before it has ended), after at
    least one that ended; and the connections that ended last (within SERVER_GONE_S of the last
    first FIN or RST) were all closed by the server. A server that went away closes every
    connection it holds at once, and its clients come back on new connections; a broker or client
    that stops closes its own connection, and any connection going on through the moment says the
    server stayed. The old session ends at the last segment before the new one's SYN."""
    cuts: dict[float, float] = {}
    suffix = f":{server_port}"
    for by_tuple in ends.values():
        by_server: dict[str, list[ConnectionEnds]] = {}
        for (lower, higher), found in by_tuple.items():
            server = lower if lower.endswith(suffix) else higher
            by_server.setdefault(server, []).append(found)
        for connections in by_server.values():
            cuts.update(_restarts_of(connections))
    return cuts


def _restarts_of(connections: list[ConnectionEnds]) -> dict[float, float]:
    """restarts_within for one server endpoint's connections in one file, in O(n log n): a file
    may hold a hundred thousand connections. Where none spans a SYN, those that began before it are
    those that ended before it: a prefix of the connections in the order they ended."""
    by_last = sorted(connections, key=lambda c: c.last)
    lasts = [c.last for c in by_last]
    firsts = sorted(c.first for c in connections)
    latest_close: list[float | None] = [None]  # of the first k connections to end
    not_by_server = [0]
    for c in by_last:
        close = latest_close[-1]
        if c.first_close is not None:
            close = c.first_close if close is None else max(close, c.first_close)
        latest_close.append(close)
        not_by_server.append(not_by_server[-1] + (not c.server_closed))
    cuts = {}
    for start in sorted(c.first for c in connections if c.opened):
        ended = bisect.bisect_left(lasts, start)
        close = latest_close[ended]
        if not ended or bisect.bisect_left(firsts, start) != ended or close is None:
            continue  # nothing before it, a connection goes on through it, or none was closed
        last_ones = bisect.bisect_left(lasts, close - SERVER_GONE_S)
        if not_by_server[ended] == not_by_server[last_ones]:
            cuts[start] = lasts[ended - 1]
    return cuts


def _server_went_away(connections: list[ConnectionEnds]) -> bool:
    """Whether the connections that ended last (within SERVER_GONE_S of the last first FIN or
    RST, and any still open then) were all closed by the server."""
    closes = [c.first_close for c in connections if c.first_close is not None]
    if not closes:
        return False
    gone = max(closes) - SERVER_GONE_S
    return all(c.server_closed for c in connections if c.last >= gone)


def restarted_ends(files: FileSpans, ends: dict[str, dict[tuple[str, str], ConnectionEnds]], restarts: set[float],
                   cuts: dict[float, float]) -> frozenset[float]:
    """The ends of the periods the NameServer ended by going away (TimeBins.restarted): where it
    restarted within a file (``cuts``), and at the end of a file after which another session
    starts (``restarts``) if the server closed every connection it held there: rotated files cut
    between the server going away and its return say what the whole file says."""
    ended = set(cuts.values())
    for (_, last, before), (first, _, _) in zip(files, files[1:], strict=False):
        if first in restarts and _server_went_away(list(ends.get(before, {}).values())):
            ended.add(last)
    return frozenset(ended)


def capture_periods(spans: list[tuple[float, float]], restarts: set[float] = frozenset(),  # type: ignore[assignment]
                    cuts: dict[float, float] | None = None) -> list[tuple[float, float]]:
    """Files' (first, last) record times merged where less than PERIOD_GAP_S apart, unless the
    later file starts another session (``restarts``: server_restarts), and cut where the server
    restarted within a file (``cuts``: restarts_within)."""
    cuts = cuts or {}
    pieces = []
    for first, last in spans:
        for start in sorted(s for s in cuts if first < s <= last):
            pieces.append((first, cuts[start]))
            first = start
        pieces.append((first, last))
    periods: list[list[float]] = []
    for first, last in sorted(pieces):
        if periods and first - periods[-1][1] <= PERIOD_GAP_S and first not in restarts and first not in cuts:
            periods[-1][1] = max(periods[-1][1], last)
        else:
            periods.append([first, last])
    return [(first, last) for first, last in periods]


def role(broker_id: int | None) -> str | None:
    """RocketMQ's own rule: brokerId 0 is the master."""
    return None if broker_id is None else "MASTER" if broker_id == 0 else "SLAVE"
