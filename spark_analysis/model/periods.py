"""The captures the input files are (a file, or a part of one where nothing was captured for a
while, or a rotated set chained by time and by the connections its files carry on), the capture
periods and the time bins over them, when each endpoint was observed, and the thresholds every
layer above reads (the NameServer's expiry, the report's plot sizes).

Pure: the driver computes the periods from the reading tasks' facts; the liveness walk and the
report read them.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from spark_analysis.capture.inputs import PERIOD_GAP_S as PERIOD_GAP_S  # the report's thresholds are read here
from spark_analysis.capture.inputs import Piece, Silence
from spark_analysis.capture.packets import ACK, FIN, RST, SYN
from spark_analysis.capture.reassembly import SEGMENT
from spark_analysis.model.sessions import FileSpans, period_label
from twisted_namesrv.bodies.route import MASTER_ID
from twisted_namesrv.state.routes import DEFAULT_BROKER_CHANNEL_EXPIRED_TIME

#: a broker silent this long is removed by the NameServer (the server's own default: 4.9.8's
#: BROKER_CHANNEL_EXPIRED_TIME, 5.x's default heartbeatTimeoutMillis); a gap over NEAR_EXPIRY_S up to it came close
EXPIRY_SECONDS = DEFAULT_BROKER_CHANNEL_EXPIRED_TIME // 1000
NEAR_EXPIRY_S = EXPIRY_SECONDS // 2
#: a file that starts this soon after another ended continues it (a rotated set), though no
#: connection says so: tcpdump -G or -C starts the next file with the packet after the last one
ROTATION_TOLERANCE_S = 1.0
#: a broker registers and a client looks its routes up every 30 s: a file lasting this long hears
#: again the connections a capture it continues left open; a shorter one may hear none of them
HEARD_AGAIN_S = 30.0
#: a connection carried on into the next file: each way, its first sequence number there at most
#: this far past where it stopped (bytes the capture missed), or this far before (a retransmission)
SEQUENCE_AHEAD = 1 << 24
SEQUENCE_BEHIND = 1 << 16
SEQUENCE_SPACE = 1 << 32
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
        return self.of_in(self.period_of(t), t)

    def of_in(self, period: int, t: float) -> int:
        """The bin of ``t``, known to be in capture period ``period`` (period_of)."""
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
    server accepted), the SYNs answered by a reset (refused: nothing listening), the last
    segment carrying bytes (model/endpoints.py reads them per server endpoint), and how many of
    its bytes a snap length cut (``uncaptured``: sent and seen, not kept)."""

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
    #: each way (lower to higher, then back): its first sequence number, and the one that would
    #: follow its last byte (and SYN or FIN); None where that way sent nothing
    first_seq: tuple[int | None, int | None] = (None, None)
    next_seq: tuple[int | None, int | None] = (None, None)
    uncaptured: int = 0

    def goes_on_in(self, later: ConnectionEnds) -> bool:
        """Whether ``later`` (the same 4-tuple in the next file) carries this connection on: open
        at this one's end, no SYN there, and each way's sequence numbers going on from here."""
        if self.closed or later.opened:
            return False
        return all(not SEQUENCE_AHEAD < ahead < SEQUENCE_SPACE - SEQUENCE_BEHIND for ahead in self._ahead(later))

    def missed_before(self, later: ConnectionEnds) -> bool:
        """Whether ``later``, carrying this connection on, starts past where it stopped on a way:
        bytes sent between them that the capture did not see."""
        return any(0 < ahead <= SEQUENCE_AHEAD for ahead in self._ahead(later))

    def _ahead(self, later: ConnectionEnds) -> list[int]:
        """Each way's first sequence number in ``later`` less where this one stopped, modulo 2**32
        (a way that sent nothing in either left out)."""
        return [(goes_on - stopped) % SEQUENCE_SPACE for stopped, goes_on in zip(self.next_seq, later.first_seq,
                                                                                 strict=True)
                if stopped is not None and goes_on is not None]

    def merge(self, other: ConnectionEnds | None) -> ConnectionEnds:
        """The same 4-tuple in another byte range or file: the earlier start, the later end,
        the earlier first close and acceptance; the refused SYNs of both; the bytes both left uncaptured."""
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
                              tuple(sorted({*self.refused_at, *other.refused_at})), max(payloads, default=None),
                              _either(start.first_seq, end.first_seq), _either(end.next_seq, start.next_seq),
                              self.uncaptured + other.uncaptured)


def note_ends(ends: dict[tuple[str, str], ConnectionEnds], piece: Piece) -> None:
    """How a 4-tuple starts and ends in a file (ConnectionEnds), from one of its pieces, merged into
    what ``ends`` knows of it: its first and last segments, its first FIN or RST once accepted (and
    which end sent it), who sent its SYNs (the client), when the server accepted, the SYNs it
    refused (answered by a reset: a port reused after one is still a connection; a SYN again with the
    sequence number of the one before it is that attempt again, captured twice on two interfaces
    or sent again) and its last segment with bytes."""
    rows = np.frombuffer(piece.rows, SEGMENT)
    if not len(rows):
        return
    flags, forward = rows["flags"], rows["forward"]
    syns = np.flatnonzero(flags & (SYN | ACK) == SYN)
    accepts = np.flatnonzero(flags & (SYN | ACK) == SYN | ACK)
    refused = tuple(float(rows[i]["ts"]) for n, i in enumerate(syns) if _answered_by_reset(flags, forward, int(i))
                    and not (n and rows[syns[n - 1]]["seq"] == rows[i]["seq"]))  # the same SYN again: one attempt
    since = accepts[0] if len(accepts) else 0
    closing = np.flatnonzero(flags[since:] & (FIN | RST)) + since
    close = rows[closing[0]] if len(closing) else None
    carrying = np.flatnonzero(rows["length"] + rows["missing"] > 0)  # bytes sent, kept or cut (-s 64: none kept)
    first, last = rows[0], rows[-1]
    # what each segment reaches past its sequence number (a SYN and a FIN count one each, as in TCP)
    seq, extent = rows["seq"].astype(np.int64), rows["length"] + rows["missing"] + (flags & SYN > 0) + (flags & FIN > 0)
    ways = [_sequences(seq[forward == way], extent[forward == way]) for way in (True, False)]
    found = ConnectionEnds(float(first["ts"]), bool(first["flags"] & SYN), float(last["ts"]),
                           bool(last["flags"] & (FIN | RST)), None if close is None else float(close["ts"]),
                           close is not None and bool(close["forward"]),
                           bool(forward[syns[0]]) if len(syns) else None,
                           float(rows[accepts[0]]["ts"]) if len(accepts) else None, refused,
                           float(rows[carrying[-1]]["ts"]) if len(carrying) else None,
                           (ways[0][0], ways[1][0]), (ways[0][1], ways[1][1]), int(rows["missing"].sum()))
    ends[piece.ends] = found.merge(ends.get(piece.ends))


def _sequences(seq: np.ndarray, extent: np.ndarray) -> tuple[int | None, int | None]:
    """One way's first sequence number and the one after its furthest byte (its segments' ``seq``
    and what each reaches past it), counted from the first modulo 2**32 (retransmissions and
    reordering: the furthest, not the last). Columns, not rows: a way's rows copied whole cost a
    tenth of a reading task."""
    if not len(seq):
        return None, None
    start = int(seq[0])
    reach = (seq - start) % SEQUENCE_SPACE + extent
    return start, (start + int(reach.max())) % SEQUENCE_SPACE


def _answered_by_reset(flags: np.ndarray, forward: np.ndarray, syn: int) -> bool:
    """Whether the other end's first answer to the SYN at ``syn`` is a reset (nothing listened)."""
    answers = np.flatnonzero(forward[syn + 1:] != forward[syn])
    return bool(len(answers)) and bool(flags[syn + 1 + answers[0]] & RST)


def _either(mine: tuple[int | None, int | None], other: tuple[int | None, int | None]
            ) -> tuple[int | None, int | None]:
    """Each way's value from ``mine``, else from ``other`` (a way that sent nothing in one part)."""
    return (mine[0] if mine[0] is not None else other[0], mine[1] if mine[1] is not None else other[1])


#: 4-tuple (lower, higher) "ip:port" -> how it starts and ends in a file, or a part of one
Ends = dict[tuple[str, str], ConnectionEnds]


class FileParts(NamedTuple):
    """The input files as parts that are each one capture's: a file is one part, except where a
    silence in it (inputs.silences) is a time nothing was captured. ``spans``: (first, last, name)
    of each part, in time order, where a part's name is its file's path if the file is one part,
    else the path and when the part starts; ``ends``: each part's 4-tuples (ConnectionEnds) by
    name; ``paths``: each part's file."""

    spans: FileSpans
    ends: dict[str, Ends]
    paths: dict[str, str]

    def path(self, name: str) -> str:
        return self.paths.get(name, name)

    def not_captured(self) -> dict[str, list[tuple[float, float]]]:
        """Each file of several parts: the times between its parts, when nothing was captured."""
        found: dict[str, list[tuple[float, float]]] = {}
        last: dict[str, float] = {}
        for first, end, name in self.spans:
            path = self.path(name)
            if path in last:
                found.setdefault(path, []).append((last[path], first))
            last[path] = end
        return found


def file_parts(files: FileSpans, silences: Mapping[str, list[Silence]],
               ends: Mapping[str, Mapping[int, Mapping[tuple[str, str], ConnectionEnds]]]) -> FileParts:
    """Each file cut where nothing was captured: a silence over PERIOD_GAP_S (no packet at all)
    after which none of the connections open before it carries on (no FIN, no RST, no data going
    on; only new connections), or one carries on past bytes the capture did not see, is a capture
    stopped and started again (files joined by mergecap, a rotation with a pause in it), the
    file's parts then as separate files would be. A silence that connections carry on over from
    where they stopped is the network's (a partition captured on the NameServer's host: nothing
    was sent through it, and its idle-close FINs go on from there), and the file's part goes on
    over it (network_silence). ``ends``: the reading tasks' ends by file and by the offset where
    their stretch of it starts (inputs.Piece.part)."""
    spans: list[tuple[float, float, str]] = []
    by_name: dict[str, Ends] = {}
    paths: dict[str, str] = {}
    for first, last, path in files:
        quiet = silences.get(path, [])
        stretches: list[Ends] = [{} for _ in range(len(quiet) + 1)]
        offsets = [silence.offset for silence in quiet]
        for offset, found in ends.get(path, {}).items():
            merge_ends(stretches[bisect.bisect_right(offsets, offset)], found)
        parts = [(first, stretches[0])]
        lasts = []
        for silence, after in zip(quiet, stretches[1:], strict=True):
            if network_silence(parts[-1][1], after):  # the capture ran on
                merge_ends(parts[-1][1], after)
            else:
                lasts.append(silence.before)
                parts.append((silence.after, after))
        lasts.append(last)
        for (start, found), end in zip(parts, lasts, strict=True):
            name = path if len(parts) == 1 else f"{path} from {period_label(start)}"
            spans.append((start, end, name))
            by_name[name] = found
            paths[name] = path
    return FileParts(tuple(sorted(spans)), by_name, paths)


def network_silence(before: Mapping[tuple[str, str], ConnectionEnds],
                    after: Mapping[tuple[str, str], ConnectionEnds]) -> bool:
    """Whether a silence within a file, between the connections as ``before`` last saw them and
    ``after`` first does, was the network's: some connection carries on over it (``goes_on_in``,
    the rule between files), and none past bytes the capture missed (sent in the silence, so
    nothing captured then: a capture paused while brokers went on heartbeating)."""
    return bool(continued(before, after)) and not missed(before, after)


def merge_ends(ends: Ends, more: Mapping[tuple[str, str], ConnectionEnds]) -> Ends:
    """Add ``more`` (the same connections seen in another byte range, stretch or file) to ``ends``,
    in place, each 4-tuple by ConnectionEnds.merge; returns ``ends``. Into an empty ``ends`` (a
    byte range's stretch is usually its own) a copy, without a call a 4-tuple."""
    if not ends:
        ends.update(more)
        return ends
    for key, found in more.items():
        ends[key] = found.merge(ends.get(key))
    return ends


class Capture(NamedTuple):
    """One capture as its files tell it: a file, or a rotated set of files each continuing the one
    before; its first and last record times and its files in time order. ``after_missing``: the
    file of a rotated set it goes on from past files missing between them (rotated_sets), and when
    that file ended: from then to ``first`` nothing was captured."""

    first: float
    last: float
    paths: tuple[str, ...]
    after_missing: tuple[str, float] | None = None


def rotated_sets(files: FileSpans, ends: Mapping[str, Mapping[tuple[str, str], ConnectionEnds]],
                 link_types: Mapping[str, int | None] | None = None) -> list[Capture]:
    """The captures the input files are, whatever their names and the order they were given in:
    each file, in time order, continues the capture (a chain of files) whose last file ended
    before it began, with the same link type, at most PERIOD_GAP_S before, and either carries on
    a TCP connection the capture saw (``continued``, from where the capture last saw it, in
    whichever of its files), or starts within ROTATION_TOLERANCE_S of its end (tcpdump -G or -C:
    the next file starts with the packet after the last of the one before), or lasts less than
    HEARD_AGAIN_S and contradicts none of the connections the capture saw (a quiet rotation: with
    short files, tcpdump -G 6 or dumpcap's ring buffer, a file may hold only connections opened
    since, or a lookup's, and the next broker's heartbeat is 30 s away); of several such, the one
    it continues most connections of, then the nearest (by the quiet rule alone: the nearest, if
    no other it could continue so ran at the same time, _only_quiet_one). Otherwise (a 4-tuple the capture saw open,
    opened anew or with sequence numbers that do not go on; a longer file hearing none of its
    connections) it starts a capture of its own: another machine's or interface's capture running
    at the same time, or one started later (another session).

    A file that carries on a capture's connections past bytes no file holds, more than
    ROTATION_TOLERANCE_S after its last file ended, is not its next file: files between them are
    missing (a ring, ``tcpdump -W N``, overwrote them; or they were not given), and the time
    between was not captured (network_silence's rule within a file, between files). It starts a
    capture of its own, ``after_missing`` that last file (if no capture it continues without a
    hole): the brokers' silences and the endpoints' stories are not judged across the hole. That
    capture goes on with what the one before it saw (which no later file continues): a connection
    last seen before the hole and heard again only in a later file is carried on past the same hole,
    not another."""
    link_types = link_types or {}
    chains: list[list[tuple[float, float, str]]] = []
    seen: dict[int, dict[tuple[str, str], ConnectionEnds]] = {}  # per chain (by id): each 4-tuple as last seen
    after_missing: dict[int, tuple[str, float]] = {}  # per chain (by id) begun past missing files: the file before
    since: dict[int, float] = {}  # per such chain: its start (bytes missed before it are its hole's)
    open_: list[list[tuple[float, float, str]]] = []  # those a later file may still continue
    for span in sorted(files):
        first, end, path = span
        here = ends.get(path, {})
        short = end - first < HEARD_AGAIN_S
        open_ = [chain for chain in open_ if first - chain[-1][1] <= PERIOD_GAP_S]
        best: tuple[tuple[int, float], list[tuple[float, float, str]]] | None = None
        quiet: list[tuple[float, list[tuple[float, float, str]]]] = []  # those only a short file's rule allows
        holed: list[tuple[float, list[tuple[float, float, str]]]] = []  # those it goes on from past missing files
        for chain in open_:
            _, last, before = chain[-1]
            gap = first - last
            if not 0.0 <= gap <= PERIOD_GAP_S or link_types.get(before) != link_types.get(path):
                continue
            shared = continued(seen[id(chain)], here)
            if shared and gap > ROTATION_TOLERANCE_S and missed(seen[id(chain)], here, since.get(id(chain))):
                holed.append((gap, chain))
            elif shared or gap <= ROTATION_TOLERANCE_S:
                score = (shared, -gap)
                if best is None or score > best[0]:
                    best = (score, chain)
            elif short and not contradicted(seen[id(chain)], here):
                quiet.append((gap, chain))
        joined = best[1] if best is not None else None if holed else _only_quiet_one(quiet)
        if joined is None:
            chain = [span]
            chains.append(chain)
            open_.append(chain)
            if holed:
                _, _, earlier = min((gap, id(found), found) for gap, found in holed)
                after_missing[id(chain)], since[id(chain)] = (earlier[-1][2], earlier[-1][1]), first
                seen[id(chain)] = dict(seen[id(earlier)])
                open_.remove(earlier)
        else:
            chain = joined
            chain.append(span)
        merge_ends(seen.setdefault(id(chain), {}), here)
    return sorted(Capture(chain[0][0], max(last for _, last, _ in chain), tuple(path for _, _, path in chain),
                          after_missing.get(id(chain))) for chain in chains)


def _only_quiet_one(quiet: list[tuple[float, list[tuple[float, float, str]]]]
                   ) -> list[tuple[float, float, str]] | None:
    """Of the captures a short file could continue by the quiet rule alone (it carries on none of
    their connections), the nearest, unless another of them ran at the same time: then two capture
    points run at once (the NameServer's host and a broker's, each rotating) and nothing says which
    one the file is of; joined to the wrong one, its later files would follow it and the two points'
    copies of a connection be one capture's (read twice). It starts a capture of its own, as it did
    before the quiet rule."""
    if not quiet:
        return None
    _, nearest = min(quiet, key=lambda found: found[0])
    start, end = nearest[0][0], nearest[-1][1]
    if any(chain is not nearest and chain[0][0] <= end and start <= chain[-1][1] for _, chain in quiet):
        return None
    return nearest


def continued(before: Mapping[tuple[str, str], ConnectionEnds], after: Mapping[tuple[str, str], ConnectionEnds]
              ) -> int:
    """How many connections of one file the next carries on: a 4-tuple still open at the end of
    the first that the second has without a SYN, each way's sequence numbers going on from where
    they stopped (bytes the capture missed between them, or a retransmission, within a window)."""
    return sum(1 for key in before.keys() & after.keys() if before[key].goes_on_in(after[key]))


def missed(before: Mapping[tuple[str, str], ConnectionEnds], after: Mapping[tuple[str, str], ConnectionEnds],
           since: float | None = None) -> bool:
    """Whether the next file carries on some connection past bytes neither file holds (sent
    between them, when nothing captured them): ConnectionEnds.missed_before. ``since``: only of
    connections last seen from then on (those seen before were missed in a known hole)."""
    return any(before[key].goes_on_in(after[key]) and before[key].missed_before(after[key])
               for key in before.keys() & after.keys() if since is None or before[key].last >= since)


def contradicted(before: Mapping[tuple[str, str], ConnectionEnds], after: Mapping[tuple[str, str], ConnectionEnds]
                 ) -> bool:
    """Whether the next file cannot continue a capture: a 4-tuple the capture last saw open is
    there opened anew, or with sequence numbers that do not go on from where it stopped."""
    return any(not before[key].closed and not before[key].goes_on_in(after[key])
               for key in before.keys() & after.keys())


def capture_periods(captures: list[Capture]) -> list[tuple[float, float]]:
    """The times something was captured: captures that overlap in time (several machines or
    interfaces captured at once) are one period; a capture that starts after the others ended is
    another period, after a time nothing was captured or, within PERIOD_GAP_S, as another session
    (it continues none of their connections: rotated_sets). A NameServer restarted within them is
    a story of its endpoint (model/endpoints.py), not a cut of the capture."""
    periods: list[list[float]] = []
    for capture in sorted(captures):
        if periods and capture.first <= periods[-1][1]:
            periods[-1][1] = max(periods[-1][1], capture.last)
        else:
            periods.append([capture.first, capture.last])
    return [(first, last) for first, last in periods]


def observed_spans(captures: list[Capture], ends: Mapping[str, Mapping[tuple[str, str], ConnectionEnds]]
                   ) -> dict[str, tuple[tuple[float, float], ...]]:
    """When each endpoint was observed: the spans of the captures with any of its segments (the
    capture covered it from its first record to its last, silent or not), merged where they
    overlap. A server seen only in a capture that stopped earlier than another is not observed
    after its capture's end (nothing is known of it then)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for capture in captures:
        seen = {end for path in capture.paths for key in ends.get(path, {}) for end in key}
        for endpoint in seen:
            spans.setdefault(endpoint, []).append((capture.first, capture.last))
    return {endpoint: tuple(capture_periods([Capture(first, last, ()) for first, last in found]))
            for endpoint, found in spans.items()}


def endpoint_files(ends: Mapping[str, Mapping[tuple[str, str], ConnectionEnds]],
                   paths: Mapping[str, str] | None = None) -> dict[str, frozenset[str]]:
    """The input files that carried each endpoint's segments (``ends`` by file, or by part of
    one: FileParts, whose ``paths`` name their files)."""
    paths = paths or {}
    found: dict[str, set[str]] = {}
    for name, keys in ends.items():
        path = paths.get(name, name)
        for key in keys:
            for end in key:
                found.setdefault(end, set()).add(path)
    return {end: frozenset(paths) for end, paths in found.items()}


def role(broker_id: int | None) -> str | None:
    """RocketMQ's own rule: brokerId MASTER_ID (0) is the master."""
    return None if broker_id is None else "MASTER" if broker_id == MASTER_ID else "SLAVE"
