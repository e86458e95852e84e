"""Server endpoints found in the capture, and what their own packets say of each: when it took
its first connection, when it went away and came back (a restart), when it stopped, and the
connection attempts it refused while nothing listened.

Evidence by endpoint (docs/capture-report.md): a server is the end of a connection that received
its SYN (the other end opened it), or, for a connection older than the capture, the end that is a
server elsewhere in it (else the end more connections share: a listener is shared, an ephemeral
port is not). A restart of an endpoint needs that endpoint's own evidence: its established
connections closed by the server together (within SERVER_GONE_S), at least one of them busy until
then (a server that closes connections silent for minutes is expiring them, not going away; one
closing a client it sent nothing to is turning that client away: turned_away), with
none going on through that moment, then a new connection accepted. Refused attempts (a SYN
answered by a reset, never accepted) alone are never a restart: while the endpoint is down they are
part of the restart; before it first listened, after it stopped, or while it has live connections
(a self-probe of another address, a launch script polling the port) they are counted and told as
information. Between two of its connections, with none open through them, they are its own
evidence of a restart no connection saw (a cluster stopped cleanly, brokers first: nothing open for
the server to close as it went): a kernel resets a SYN only where nothing listens, and it listened
before and after (_unseen_outages).

Pure: the driver runs it over the reading tasks' ConnectionEnds (model/periods.py).
"""

from __future__ import annotations

import bisect
import heapq
import ipaddress
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spark_analysis.model.periods import NEAR_EXPIRY_S, SEQUENCE_SPACE, SERVER_GONE_S, ConnectionEnds, merge_ends

#: 4-tuple (lower, higher) "ip:port" -> how it starts and ends, over every file
Ends = Mapping[tuple[str, str], ConnectionEnds]


def merged_ends(by_file: Mapping[str, Ends]) -> dict[tuple[str, str], ConnectionEnds]:
    """Each 4-tuple's ends over every file (rotated files continue each other's connections)."""
    merged: dict[tuple[str, str], ConnectionEnds] = {}
    for ends in by_file.values():
        merge_ends(merged, ends)
    return merged


def server_sides(ends: Ends) -> dict[tuple[str, str], str]:
    """The server end of each 4-tuple: the end its SYN went to; for a 4-tuple whose SYN was not
    captured, an end that listens elsewhere in the capture, else the end more 4-tuples share."""
    sides: dict[tuple[str, str], str] = {}
    for key, found in ends.items():
        if found.syn_by_lower is not None:
            sides[key] = key[1] if found.syn_by_lower else key[0]
    listeners = set(sides.values())
    shared = Counter(end for key in ends for end in key)
    for key in ends.keys() - sides.keys():
        lower, higher = key
        if (lower in listeners) != (higher in listeners):
            sides[key] = lower if lower in listeners else higher
        else:
            sides[key] = max(key, key=lambda end: (shared[end], -_port(end)))
    return sides


@dataclass(frozen=True)
class OtherAddressDown:
    """What another address of one listener told of the same outage by its own packets: when it went
    (``down``: its closes, or of an ``unseen`` one its first refused attempt), the attempts refused there
    while it was down (the last at ``last_refused``) and the connection it took again (``up``, None: none
    within the capture)."""

    endpoint: str
    down: float
    unseen: bool
    refused: int
    last_refused: float | None
    up: float | None


@dataclass
class Outage:
    """The endpoint went away (its established connections closed by it together) at ``down``,
    and took a new connection again at ``up`` (None: not within the capture: it stopped)."""

    down: float
    up: float | None
    closed: int  # established connections it closed as it went away
    refused: int = 0  # attempts refused while it was down
    #: no connection was open as it went: ``down`` is its first refused attempt, the first sign of it
    unseen: bool = False
    #: told by the packets of another endpoint, the same listener under another of this host's
    #: addresses (_one_listener): that endpoint; None: by this endpoint's own
    seen_as: str | None = None
    #: of an unseen outage, the endpoint's last packet before it went (its connections' latest end):
    #: it listened then. Derived, not compared (two outages alike are the same whatever their bounds).
    last_seen: float | None = field(default=None, compare=False)
    #: its latest attempt refused while down: nothing listened then
    last_refused: float | None = field(default=None, compare=False)
    #: the outages another address of the same listener told by its own packets at the same time
    #: (_link_addresses): a launch script's or health check's polls of 127.0.0.1:9876 while the
    #: NameServer its brokers reach as [::1]:9876 came back. Derived, not compared.
    also_down_as: list[OtherAddressDown] = field(default_factory=list, compare=False)

    def down_range(self) -> tuple[float, float] | None:
        """How long it was down as the packets bound it, or None where they do not (it stopped; no
        attempt refused in it, so nothing says it was down a moment before ``up``; told by another
        address's packets). At least from its going (its closes; of an unseen one, its first refused
        attempt) to its last refused attempt: nothing listened through those; at most from its going
        (of an unseen one, its last packet before, when it still listened) to the connection it took
        again. ``up - down``, the figure said alone before, is neither bound of an unseen outage."""
        if self.up is None or self.last_refused is None or self.seen_as is not None:
            return None
        went = self.last_seen if self.unseen else self.down
        if went is None:
            return None
        return max(self.last_refused - self.down, 0.0), self.up - went


@dataclass
class EndpointStory:
    """One server endpoint as its packets tell it."""

    endpoint: str
    first: float  # its first segment in the capture
    last: float
    accepted: int = 0  # connections it accepted (a SYN-ACK seen)
    #: of those, the ones that carried no byte either way: a port check (a launch script's poll, a
    #: load balancer's probe), which says nothing of what the server is
    empty: int = 0
    first_accepted: float | None = None
    outages: list[Outage] = field(default_factory=list)
    #: refused attempts not during an outage: (count, first, last, when) with when one of
    #: "before_start" (it had accepted nothing yet), "after_stop", "while_up", "never_listening"
    refused: list[tuple[int, float, float, str]] = field(default_factory=list)
    #: clients it closed after their bytes without sending one (turned_away): client "ip:port" -> that close
    turned_away: dict[str, float] = field(default_factory=dict)

    @property
    def restarts(self) -> list[Outage]:
        return [o for o in self.outages if o.up is not None]

    @property
    def stopped(self) -> Outage | None:
        return self.outages[-1] if self.outages and self.outages[-1].up is None else None

    def run_starts(self) -> tuple[float, ...]:
        """When each run of the server starts as the capture sees it: the first, then each return."""
        return tuple(o.up for o in self.restarts if o.up is not None)

    def went_away(self, t: float) -> Outage | None:
        """The outage whose going-away ``t`` is part of (a close by the server within SERVER_GONE_S)."""
        return next((o for o in self.outages if o.down - SERVER_GONE_S <= t <= o.down + SERVER_GONE_S), None)


@dataclass
class _Connection:
    first: float
    last: float
    close: float | None
    by_server: bool
    busy_until: float | None  # its last segment carrying bytes


def endpoint_stories(ends: Ends, sides: Mapping[tuple[str, str], str] | None = None) -> dict[str, EndpointStory]:
    """Every server endpoint's story (see the module's docstring)."""
    sides = server_sides(ends) if sides is None else sides
    established: dict[str, list[_Connection]] = {}
    refused: dict[str, list[tuple[float, int]]] = {}
    stories: dict[str, EndpointStory] = {}
    for key, found in ends.items():
        server = sides[key]
        story = stories.get(server)
        if story is None:
            story = stories[server] = EndpointStory(server, found.first, found.last)
        story.first, story.last = min(story.first, found.first), max(story.last, found.last)
        refused.setdefault(server, []).extend((t, 1) for t in found.refused_at)
        if found.accepted_at is None and found.syn_by_lower is not None and found.last_payload is None:
            continue  # only refused attempts: never a connection
        first = found.first
        if found.accepted_at is not None:
            story.accepted += 1
            story.empty += found.last_payload is None
            first = found.accepted_at
            story.first_accepted = min(story.first_accepted or first, first)
        by_server = found.first_close is not None and found.close_by_lower == (server == key[0])
        refusal = by_server and turned_away(found, server == key[0])
        if refusal and found.last_payload is not None and found.first_close is not None:  # the client's bytes
            story.turned_away[key[1] if server == key[0] else key[0]] = found.first_close
        busy = None if refusal else found.last_payload
        established.setdefault(server, []).append(_Connection(first, found.last, found.first_close, by_server, busy))
    connected = {server: sorted(established.get(server, []), key=lambda c: c.first) for server in stories}
    attempted = {server: sorted(refused.get(server, [])) for server in stories}
    for server, story in stories.items():
        connections, attempts = connected[server], attempted[server]
        story.outages = _outages(connections)
        story.outages = sorted(story.outages + _unseen_outages(connections, attempts, story.outages),
                               key=lambda o: o.down)
    listeners = _one_listener(stories, own_addresses(ends), connected, attempted)
    for server, story in stories.items():
        _place_refused(story, attempted[server], bool(connected[server]))
        # a close as the server went away (stopped with a request unanswered) is its going, not a refusal
        story.turned_away = {client: t for client, t in story.turned_away.items() if story.went_away(t) is None}
    for endpoints in listeners:
        _link_addresses([stories[endpoint] for endpoint in endpoints])
    return stories


def own_addresses(ends: Ends) -> set[str]:
    """The capture host's own addresses, as the packets prove them: its loopback addresses, and any
    address a connection joins to itself (the 5.x NameServer's scanAvailableNameSrv connects from
    its first non-loopback address to that address, its own; so does any client of this host
    using the host's address)."""
    own: set[str] = set()
    for lower, higher in ends:
        hosts = (_host(lower), _host(higher))
        own.update(host for host in hosts if _loopback(host))
        if hosts[0] == hosts[1]:
            own.add(hosts[0])
    return own


def _one_listener(stories: dict[str, EndpointStory], own: set[str], connected: Mapping[str, list[_Connection]],
                  attempted: Mapping[str, list[tuple[float, int]]]) -> list[list[str]]:
    """A server listening on all addresses (Java's bindAddress 0.0.0.0, as it ships) is reached at
    each address of its host: 127.0.0.1:9877 by the brokers beside it, 10.38.1.1:9877 by an
    operator's box and by its own probe, one listener. A capture on that host holds both, and where
    the server went away with nothing open at one of them, only the other's packets tell it. So each
    outage of an endpoint is given to the others of its port on this host's own addresses (``own``)
    that accepted connections too, marked ``seen_as``, where nothing of theirs says otherwise: none
    of their connections goes on through it, and no attempt was refused at one while the other took
    connections (the same port on two addresses with two listeners, or one bound to one address
    only: 127.0.0.1:9876 up while 10.38.1.1:9876 refuses). Two hosts' endpoints are never one:
    another host's address is not this host's own. Returns the groups of endpoints taken for one
    listener."""
    by_port: dict[str, list[str]] = {}
    listeners: list[list[str]] = []
    for endpoint in sorted(stories):
        if _host(endpoint) in own and connected.get(endpoint):
            by_port.setdefault(endpoint.rpartition(":")[2], []).append(endpoint)
    for endpoints in by_port.values():
        if len(endpoints) < 2 or not _alike(endpoints, connected, attempted):
            continue
        listeners.append(endpoints)
        told = {endpoint: list(stories[endpoint].outages) for endpoint in endpoints}
        for endpoint in endpoints:
            for other in endpoints:
                if other == endpoint:
                    continue
                for outage in told[other]:
                    if outage.seen_as is None and _fits_outage(outage, stories[endpoint], connected[endpoint]):
                        stories[endpoint].outages.append(Outage(outage.down, outage.up, 0, unseen=True,
                                                                seen_as=other))
            stories[endpoint].outages.sort(key=lambda o: o.down)
    return listeners


def _link_addresses(stories: list[EndpointStory]) -> None:
    """Each outage an address of one listener told by its own packets, given the overlapping ones its
    other addresses told by theirs (``also_down_as``): one restart seen at two addresses. The 5.x
    NameServer listening on every address, its brokers at [::1]:9876, went away closing their
    connections; meanwhile its launch script polled 127.0.0.1:9876 every 0.1 s, 137 attempts refused
    until it listened again, which no finding told (that address asked nothing: no NameServer's
    restart of its own). Outages another address was only given (``seen_as``) add nothing."""
    for story in stories:
        for outage in story.outages:
            if outage.seen_as is not None:
                continue
            end = float("inf") if outage.up is None else outage.up
            for other in stories:
                if other is story:
                    continue
                outage.also_down_as.extend(
                    OtherAddressDown(other.endpoint, theirs.down, theirs.unseen, theirs.refused,
                                     theirs.last_refused, theirs.up)
                    for theirs in other.outages
                    if theirs.seen_as is None and theirs.down < end
                    and outage.down < (float("inf") if theirs.up is None else theirs.up))


def _alike(endpoints: list[str], connected: Mapping[str, list[_Connection]],
           attempted: Mapping[str, list[tuple[float, int]]]) -> bool:
    """Whether no attempt was refused at one of ``endpoints`` while another one's connection went on."""
    spans = _Spans([(c.first, c.last) for endpoint in endpoints for c in connected[endpoint]], closed=True)
    for endpoint in endpoints:
        others = _Spans([(c.first, c.last) for other in endpoints if other != endpoint for c in connected[other]],
                        closed=True)
        if any(others.hold(t) for t, _count in attempted.get(endpoint, [])):
            return False
    return bool(spans.starts)


def _fits_outage(outage: Outage, story: EndpointStory, connections: list[_Connection]) -> bool:
    """Whether another address's outage can be this endpoint's: none of its own tells it already
    (one overlapping), no connection of it goes on through the outage, and it took none after a stop."""
    end = float("inf") if outage.up is None else outage.up
    if any(own.down < end and outage.down < (float("inf") if own.up is None else own.up) for own in story.outages):
        return False
    return not any(c.first < end and c.last > outage.down for c in connections)


def _host(endpoint: str) -> str:
    return endpoint.rpartition(":")[0].strip("[]")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def turned_away(found: ConnectionEnds, server_is_lower: bool) -> bool:
    """Whether the server accepted this connection within the capture and sent nothing on it but
    its SYN-ACK and FIN (or a reset): a client it would not serve, closed after the client's bytes
    (a plain client at a NameServer with tls.server.mode enforcing, Java's or ours; a frame it could
    not decode). Such a close is the server answering that client, not the server going away: it is
    never a busy connection's close in _outages (a NameServer that refused a plain client and was
    stopped later with nothing open was told "stopped" at that refusal)."""
    if found.accepted_at is None:
        return False
    way = 0 if server_is_lower else 1
    first, following = found.first_seq[way], found.next_seq[way]
    if first is None or following is None:
        return False  # its SYN-ACK not read: unknown
    return (following - first) % SEQUENCE_SPACE <= 2  # its SYN and FIN, no byte


def _outages(connections: list[_Connection]) -> list[Outage]:
    """Where the endpoint went away: a moment no connection spans, after which a new connection
    starts (a restart) or none (it stopped), and the connections that ended last before it (within
    SERVER_GONE_S) were all closed by the server, one of them busy until NEAR_EXPIRY_S before.

    In O(n log n) for n connections: each moment reads counts over the connections ended before it
    (prefix sums in the order they end) and the earliest close among the last ones (_WindowMin).
    It walked every connection ended before each moment: a capture of 100,000 one-packet
    connections (27 MB: a port scan, a probe every second for a day) held the driver for hours."""
    outages: list[Outage] = []
    by_end = sorted(connections, key=lambda c: c.last)
    lasts = [c.last for c in by_end]
    starts = sorted(c.first for c in connections)
    latest: list[float | None] = []  # the latest close among by_end[:i + 1]
    not_by_server, busy = [0], [0]  # how many of by_end[:i] the server did not close, were busy to their close
    for c in by_end:
        before = latest[-1] if latest else None
        latest.append(before if c.close is None else c.close if before is None else max(before, c.close))
        not_by_server.append(not_by_server[-1] + (not c.by_server))
        busy.append(busy[-1] + (c.busy_until is not None and c.close is not None
                                and c.close - c.busy_until < NEAR_EXPIRY_S))
    earliest = _WindowMin([c.close for c in by_end])
    moments = sorted({c.first for c in connections} | {float("inf")})
    for moment in moments:
        ended = bisect.bisect_left(lasts, moment)
        if not ended or bisect.bisect_left(starts, moment) != ended:
            continue  # nothing before it, or a connection goes on through it
        last_close = latest[ended - 1]
        if last_close is None:
            continue
        # the last ones: those of by_end[:ended] that ended within SERVER_GONE_S of its latest close
        first = min(bisect.bisect_left(lasts, last_close - SERVER_GONE_S), ended)
        if not_by_server[ended] - not_by_server[first]:
            continue
        if not busy[ended] - busy[first]:
            continue  # idle connections closed: the server expiring them, not going away
        down = earliest.least(first, ended)
        if outages and outages[-1].down == down:
            continue
        outages.append(Outage(down, None if moment == float("inf") else moment, ended - first))
    return outages


class _WindowMin:
    """The least of ``values`` (None left out) over windows ``[first, end)`` asked in an order where
    neither bound goes back (_outages' moments, in time order): a queue of the candidates, each
    value pushed and dropped once."""

    def __init__(self, values: list[float | None]) -> None:
        self.values = values
        self.queue: deque[int] = deque()  # indexes of values rising, the least first
        self.end = 0

    def least(self, first: int, end: int) -> float:
        values, queue = self.values, self.queue
        while self.end < end:
            value = values[self.end]
            if value is not None:
                while queue and values[queue[-1]] >= value:  # type: ignore[operator]
                    queue.pop()
                queue.append(self.end)
            self.end += 1
        while queue[0] < first:
            queue.popleft()
        least = values[queue[0]]
        assert least is not None
        return least


def _unseen_outages(connections: list[_Connection], attempts: list[tuple[float, int]],
                    outages: list[Outage]) -> list[Outage]:
    """Restarts no connection saw: attempts refused at moments no connection of the endpoint spans,
    after one it took and before the next (nothing listened then; it listened before and after),
    outside the outages its closes told. One per next connection, down at its first refused attempt.
    Each attempt is looked up among the outages' and the connections' spans merged (bisect): it
    walked every outage and every connection, a capture's attempts times its connections."""
    starts = sorted(c.first for c in connections)
    lasts = sorted(c.last for c in connections)
    down = _Spans([(o.down, float("inf") if o.up is None else o.up) for o in outages], closed=False)
    spanned = _Spans([(c.first, c.last) for c in connections], closed=True)
    found: dict[float, Outage] = {}
    for t, _count in attempts:
        if down.hold(t):
            continue
        after = bisect.bisect_right(starts, t)
        if not after or after == len(starts) or spanned.hold(t):
            continue
        seen = lasts[bisect.bisect_right(lasts, t) - 1]  # one began before t, and none spans it: ended before
        found.setdefault(starts[after], Outage(t, starts[after], 0, unseen=True, last_seen=seen))
    return list(found.values())


class _Spans:
    """Whether a time lies in any of some spans (``[start, end]``, or ``[start, end)`` unless
    ``closed``): the spans merged, then a bisect."""

    def __init__(self, spans: list[tuple[float, float]], closed: bool) -> None:
        self.closed = closed
        self.starts: list[float] = []
        self.ends: list[float] = []
        for start, end in sorted(spans):
            if self.ends and start <= self.ends[-1]:  # overlapping or touching: one span
                self.ends[-1] = max(self.ends[-1], end)
            else:
                self.starts.append(start)
                self.ends.append(end)

    def hold(self, t: float) -> bool:
        at = bisect.bisect_right(self.starts, t) - 1
        return at >= 0 and (t <= self.ends[at] if self.closed else t < self.ends[at])


def _place_refused(story: EndpointStory, attempts: list[tuple[float, int]], listened: bool) -> None:
    """Refused attempts during an outage count in it; the others are grouped by when they came.
    ``attempts`` in time order: the outages begun by each are kept in a heap by their place in
    ``story.outages``, the first still open on top (it took every outage per attempt)."""
    groups: dict[str, list[tuple[float, int]]] = {}
    begun: list[tuple[int, float]] = []  # (place in story.outages, up), of the outages down by now
    coming = sorted((o.down, place, float("inf") if o.up is None else o.up) for place, o in enumerate(story.outages))
    at = 0
    for t, count in attempts:
        while at < len(coming) and coming[at][0] <= t:
            heapq.heappush(begun, coming[at][1:])
            at += 1
        while begun and begun[0][1] <= t:  # over before this attempt, so before every later one
            heapq.heappop(begun)
        outage = story.outages[begun[0][0]] if begun else None
        if outage is not None and outage.up is not None:
            outage.refused += count
            outage.last_refused = t
            continue
        groups.setdefault(refused_when(story, t, outage, listened), []).append((t, count))
    story.refused = [(sum(c for _, c in found), found[0][0], found[-1][0], when) for when, found in groups.items()]


def refused_when(story: EndpointStory, t: float, outage: Outage | None, listened: bool) -> str:
    """When a refused attempt at ``t`` came, not in an outage that ended (``outage``: one still open
    at the capture's end, or None): the group it is told in."""
    if not listened:
        return "never_listening"
    if outage is not None:
        return "after_stop"
    if story.first_accepted is not None and t < story.first_accepted:
        return "before_start"
    return "while_up"


def nameserver_endpoints(served: Mapping[tuple[str, int], int], namesrv_codes: Iterable[int]) -> set[str]:
    """The endpoints that were asked a NameServer's own requests (``served``: (server, code) -> count)."""
    codes = set(namesrv_codes)
    return {server for (server, code), count in served.items() if code in codes and count}


def _port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])
