"""Capture periods and the time bins over them, sessions cut where a file continues no connection,
and the thresholds every layer above reads (the
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

    @classmethod
    def over(cls, periods: list[tuple[float, float]]) -> TimeBins:
        periods = periods or [(0.0, 1.0)]
        total = sum(max(end - start, 1.0) for start, end in periods)
        counts = [max(1, round(TIME_BINS * max(end - start, 1.0) / total)) for start, end in periods]
        firsts = [0]
        for count in counts:
            firsts.append(firsts[-1] + count)
        return cls(tuple(s for s, _ in periods), tuple(e for _, e in periods), tuple(firsts),
                   tuple(max(end - start, 1.0) / count for (start, end), count in zip(periods, counts, strict=True)))

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
    was (after the server accepted it, if it did), and whether the lower endpoint sent it; who sent
    its SYN (the client: the other end is the server that listens), when a SYN-ACK first came (the
    server accepted), the SYNs answered by a reset (refused: nothing listening), and the last
    segment carrying bytes (model/endpoints.py reads them per server endpoint)."""

    first: float
    opened: bool
    last: float
    closed: bool
    first_close: float | None = None
    close_by_lower: bool = False
    syn_by_lower: bool | None = None
    accepted_at: float | None = None
    refused_at: tuple[float, ...] = ()
    last_payload: float | None = None

    def merge(self, other: ConnectionEnds | None) -> ConnectionEnds:
        """The same 4-tuple in another byte range or file: the earlier start, the later end,
        the earlier first close and acceptance; the refused SYNs of both."""
        if other is None:
            return self
        start = self if self.first <= other.first else other
        end = self if self.last >= other.last else other
        closes = [ends for ends in (self, other) if ends.first_close is not None]
        close = min(closes, key=lambda ends: ends.first_close or 0.0) if closes else self
        payloads = [t for t in (self.last_payload, other.last_payload) if t is not None]
        return ConnectionEnds(start.first, start.opened, end.last, end.closed, close.first_close,
                              close.close_by_lower, start.syn_by_lower if start.syn_by_lower is not None
                              else end.syn_by_lower, min((t for t in (self.accepted_at, other.accepted_at)
                                                          if t is not None), default=None),
                              tuple(sorted({*self.refused_at, *other.refused_at})), max(payloads, default=None))


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


def capture_periods(spans: list[tuple[float, float]], restarts: set[float] = frozenset()  # type: ignore[assignment]
                    ) -> list[tuple[float, float]]:
    """Files' (first, last) record times merged where less than PERIOD_GAP_S apart, unless the
    later file starts another session (``restarts``: server_restarts). A NameServer restarted
    within them is a story of its endpoint (model/endpoints.py), not a cut of the capture."""
    periods: list[list[float]] = []
    for first, last in sorted(spans):
        if periods and first - periods[-1][1] <= PERIOD_GAP_S and first not in restarts:
            periods[-1][1] = max(periods[-1][1], last)
        else:
            periods.append([first, last])
    return [(first, last) for first, last in periods]


def role(broker_id: int | None) -> str | None:
    """RocketMQ's own rule: brokerId 0 is the master."""
    return None if broker_id is None else "MASTER" if broker_id == 0 else "SLAVE"
