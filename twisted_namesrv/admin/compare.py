"""``compare NS1 NS2 ...``: do several NameServers hold the same routes?

Each server is read the way a client reads it: cluster info (106), the topic list (206) and
every topic's route (105, standard JSON); optionally each broker address's data version
(322).  Each snapshot is flattened into paths such as
``("topic", "T", "route", "queue", "broker-a", "perm") -> 6``; container paths hold PRESENT.
A path is compared among the servers that hold all of its containers, so a missing topic is
one difference, not one per queue field.

A difference in a field only 5.x NameServers send (``V5_ONLY_FIELDS``) that vanishes when only
the servers answering as 5.x are compared is ``generation_only``: between a 4.9.8 and a 5.3.3
server it would appear on every broker of every route without saying anything about routing.

The report groups differences by their first two path parts (cluster, broker or topic and its
name) under a one-line summary.

Reading a server is written once, without I/O (``snapshot_asks``: a generator that yields each
request as an ``Ask`` and is sent its answer), and driven by whoever holds a connection: the
blocking admin client here (``snapshot``), the peers view's Twisted client and its in-process reads
(peers.py).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.codes import V5_0_0, version_name
from .client import AdminError, NamesrvClient, ResponseError, answer_read, json_body
from .terminal import printable

PRESENT = "present"
MISSING = None  # the value a server lacks
NO_ROUTE = "TOPIC_NOT_EXIST"
#: never equal to a broker's real DataVersion, so 4.x does not count the query as a heartbeat
PROBE_VERSION = b'{"counter":0,"timestamp":0}'
QUEUE_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
#: BrokerData.enableActingMaster/zoneName and TopicRouteData.topicQueueMappingByBroker: 4.9.8 has none
V5_ONLY_FIELDS = frozenset({"enableActingMaster", "zoneName", "topicQueueMappingByBroker"})
KINDS = ("cluster", "broker", "topic")  # the report's order of groups
Path = tuple[Any, ...]
#: the fields (paths) one reading of a server keeps at most, about 150 bytes each (``compare
#: --max-fields`` for another bound): the peers view holds this server's own and a peer's together,
#: so about 300 MB at most (a hostile peer of 2,000 topics each routed by 2,000 groups took a server
#: to 700 MB in 40 s, and on towards 6 GB); a cluster of 60,000 topics on two groups is about 1 M
PATHS_MAX = 1_000_000


@dataclass
class Snapshot:
    paths: dict[Path, Any]
    version: int  # the MQVersion ordinal in the server's answers: which generation's bodies it sends

    @property
    def sends_v5_fields(self) -> bool:
        return self.version >= V5_0_0

    def counts(self) -> dict[str, int]:
        return {f"{kind}s": sum(1 for p in self.paths if len(p) == 2 and p[0] == kind) for kind in ("broker", "topic")}


@dataclass
class Difference:
    path: Path
    values: dict[str, Any]  # server address -> value, MISSING where absent
    generation_only: bool = False

    def describe(self, start: int = 0) -> str:
        """``path[start:]: value on A; other value on B``."""
        groups: dict[Any, list[str]] = {}
        for addr, value in self.values.items():
            groups.setdefault(value, []).append(addr)
        shown = "; ".join(f"{_shown(value)} on {', '.join(addrs)}" for value, addrs in groups.items())
        return f"{' '.join(str(part) for part in self.path[start:])}: {shown}"

    @property
    def missing_on(self) -> tuple[str, ...]:
        return tuple(addr for addr, value in self.values.items() if value is MISSING)


@dataclass(frozen=True, slots=True)
class Ask:
    """One request a reading needs: its code, header fields and body."""

    code: int
    ext: dict[str, str] | None = None
    body: bytes | None = None


#: a reading of a server: yields the requests, is sent their answers, returns what it read
Asking = Generator[Ask, RemotingCommand, "Snapshot"]


def snapshot(client: NamesrvClient, data_versions: bool = False, max_paths: int | None = PATHS_MAX) -> Snapshot:
    """One NameServer's routes, flattened, read through a blocking client (``max_paths``: as
    ``snapshot_asks``)."""
    asks = snapshot_asks(client.addr, data_versions, max_paths)
    try:
        ask = next(asks)
        while True:
            ask = asks.send(client.call(ask.code, ask.ext, ask.body))
    except StopIteration as done:
        read: Snapshot = done.value
        return read


def _ok(addr: str, ask: Ask) -> Generator[Ask, RemotingCommand, RemotingCommand]:
    """The answer to ``ask``, which must be SUCCESS (else ResponseError)."""
    answer = yield ask
    if answer.code != ResponseCode.SUCCESS:
        raise ResponseError(addr, ask.code, answer)
    return answer


class TooBig(AdminError):
    """A server's routes hold more fields than the reading may keep (``max_paths``)."""


def snapshot_asks(addr: str, data_versions: bool = False, max_paths: int | None = PATHS_MAX) -> Asking:
    """One NameServer's routes, flattened: the requests a client makes, answered by the driver.
    ``max_paths``: past that many fields kept (about 150 bytes each) the reading stops, TooBig: a
    server's answers choose how many there are (a topic list of 16 MiB, each route up to 16 MiB),
    and the peers view reads its peers in the server's own process.  Each answer's values are
    counted over its bytes before it is decoded (``_Room.admit``): one answer of 16 MiB decoded is
    millions of objects, too many to make only to be refused.  None: no bound."""
    room = _Room(addr, max_paths)
    paths: dict[Path, Any] = {}
    answer = yield from _ok(addr, Ask(RequestCode.GET_BROKER_CLUSTER_INFO))
    info = json_body(addr, room.admit(paths, answer, "the cluster info"))
    listed = yield from _ok(addr, Ask(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    topics = json_body(addr, room.admit(paths, listed, "the topic list"))
    with answer_read(addr, "the cluster info, the topic list or a route"):  # a hostile peer's: one error
        for cluster, names in (info.get("clusterAddrTable") or {}).items():
            paths[("cluster", cluster)] = PRESENT
            paths.update({("cluster", cluster, "broker", name): PRESENT for name in names or []})
        room.check(paths)
        for name, broker in (info.get("brokerAddrTable") or {}).items():
            paths[("broker", name)] = PRESENT
            paths.update(_broker_paths(("broker", name), broker))
            if data_versions:
                paths.update((yield from _data_versions(addr, name, broker, room, paths)))
        room.check(paths)
        for topic in topics.get("topicList") or []:
            paths[("topic", topic)] = PRESENT
            paths.update((yield from _route_paths(addr, topic, room, paths)))
            room.check(paths)
        _comparable(paths)
    return Snapshot(paths, answer.version)


def values_in(body: bytes | memoryview) -> int:
    """About how many values a JSON body holds, counted over its bytes without decoding it: one more
    than its commas (one between two members of an object or an array; a comma inside a text counts
    too, which no NameServer's names hold).  A route's values and the fields a reading keeps of it
    are about as many (a queue: five of each; a broker: four or five against five)."""
    data = body if isinstance(body, bytes) else body.tobytes()  # (a view: only a capture's, never a reading's)
    return data.count(b",") + 1 if data else 0


class _Room:
    """What a reading may keep: ``check`` raises TooBig once the paths pass ``max_paths``, ``admit``
    before an answer whose values would pass it is decoded."""

    def __init__(self, addr: str, max_paths: int | None) -> None:
        self.addr, self.max_paths = addr, max_paths

    def check(self, paths: dict[Path, Any]) -> None:
        if self.max_paths is not None and len(paths) > self.max_paths:
            raise TooBig(f"{self.addr}: its routes hold more than {self.max_paths} fields to compare; "
                         f"{self._further}")

    def admit(self, paths: dict[Path, Any], answer: RemotingCommand, what: str) -> RemotingCommand:
        """``answer``, unless its values and the fields kept so far pass ``max_paths``: then TooBig,
        before anything of it is decoded."""
        if self.max_paths is not None and answer.body:
            values = values_in(answer.body)
            if len(paths) + values > self.max_paths:
                raise TooBig(f"{self.addr}: its answer to {what} holds about {values} values, {len(paths)} fields "
                             f"kept before it, more than {self.max_paths} fields to compare; {self._further}")
        return answer

    @property
    def _further(self) -> str:
        return "read no further (a cluster that big is read by namesrv-admin compare --max-fields N)"


def _comparable(paths: dict[Path, Any]) -> None:
    """``differences`` orders the paths and hashes the values: a name that is neither text nor a
    number, or a value that is a list or a table, would raise there, after the reading; raised here,
    it is the reading's (``answer_read``)."""
    for path, value in paths.items():
        hash(value)
        if not all(isinstance(part, (str, int)) for part in path):
            raise TypeError(f"a name that is neither text nor a number in {path!r}")


def _broker_paths(prefix: Path, broker: dict[str, Any]) -> dict[Path, Any]:
    paths: dict[Path, Any] = {prefix + ("cluster",): broker.get("cluster")}
    for name in ("zoneName", "enableActingMaster"):
        if name in broker:
            paths[prefix + (name,)] = broker[name]
    for bid, addr in (broker.get("brokerAddrs") or {}).items():
        paths[prefix + ("id", int(bid))] = addr
    return paths


def _data_versions(server: str, name: str, broker: dict[str, Any], room: _Room,
                   kept: dict[Path, Any]) -> Generator[Ask, RemotingCommand, dict[Path, Any]]:
    paths: dict[Path, Any] = {}
    for bid, addr in (broker.get("brokerAddrs") or {}).items():
        ext = {"brokerName": name, "brokerAddr": addr, "clusterName": broker.get("cluster") or "", "brokerId": bid}
        answer = yield from _ok(server, Ask(RequestCode.QUERY_DATA_VERSION, ext, PROBE_VERSION))
        version = json_body(server, room.admit(kept, answer, "a data version")) if answer.body else None
        paths[("broker", name, "dataVersion", int(bid))] = (
            "unknown" if version is None else f"timestamp={version.get('timestamp')} counter={version.get('counter')}")
    return paths


def _route_paths(server: str, topic: str, room: _Room,
                 kept: dict[Path, Any]) -> Generator[Ask, RemotingCommand, dict[Path, Any]]:
    ext = {"topic": topic, "acceptStandardJsonOnly": "true"}
    answer = yield Ask(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext)
    prefix: Path = ("topic", topic, "route")
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return {prefix: NO_ROUTE}
    if answer.code != ResponseCode.SUCCESS:
        raise ResponseError(server, RequestCode.GET_ROUTEINFO_BY_TOPIC, answer)
    route = json_body(server, room.admit(kept, answer, "a route"))
    paths: dict[Path, Any] = {prefix: PRESENT}
    for queue in route.get("queueDatas") or []:
        queue_prefix = prefix + ("queue", str(queue.get("brokerName")))
        paths[queue_prefix] = PRESENT
        paths.update({queue_prefix + (name,): queue.get(name) for name in QUEUE_FIELDS})
    for broker in route.get("brokerDatas") or []:
        broker_prefix = prefix + ("broker", str(broker.get("brokerName")))
        paths[broker_prefix] = PRESENT
        paths.update(_broker_paths(broker_prefix, broker))
    if route.get("orderTopicConf") is not None:
        paths[prefix + ("orderTopicConf",)] = route["orderTopicConf"]
    for addr, servers in (route.get("filterServerTable") or {}).items():
        paths[prefix + ("filterServer", addr)] = ",".join(sorted(servers or []))
    if route.get("topicQueueMappingByBroker"):
        paths[prefix + ("topicQueueMappingByBroker",)] = json.dumps(route["topicQueueMappingByBroker"],
                                                                   sort_keys=True)
    return paths


def _path_key(path: Path) -> tuple[tuple[bool, Any], ...]:
    return tuple((isinstance(part, str), part) for part in path)


def differences(snapshots: dict[str, Snapshot]) -> list[Difference]:
    """Every path whose value is not the same on all servers that hold its containers."""
    union: set[Path] = set().union(*(s.paths for s in snapshots.values()))
    found = []
    for path in sorted(union, key=_path_key):
        containers = [path[:i] for i in range(1, len(path)) if path[:i] in union]
        eligible = [addr for addr, s in snapshots.items()
                    if all(s.paths.get(container) == PRESENT for container in containers)]
        values = {addr: snapshots[addr].paths.get(path, MISSING) for addr in eligible}
        if len(values) > 1 and len(set(values.values())) > 1:
            v5_values = {values[addr] for addr in eligible if snapshots[addr].sends_v5_fields}
            found.append(Difference(path, values, path[-1] in V5_ONLY_FIELDS and len(v5_values) <= 1))
    return found


@dataclass
class Report:
    """The differences to show, grouped, and the one-line summary that heads them."""

    addrs: list[str]
    shown: list[Difference]
    ignored: list[Difference]  # generation-only, left out unless --strict

    @classmethod
    def of(cls, addrs: list[str], found: list[Difference], strict: bool) -> Report:
        shown = [d for d in found if strict or not d.generation_only]
        return cls(addrs, _without_echoes(shown), [d for d in found if d.generation_only and not strict])

    @cached_property
    def groups(self) -> list[tuple[Path, Difference | None, list[Difference]]]:
        """(cluster/broker/topic and name, the difference of that entity itself, the ones inside it)."""
        grouped: dict[Path, list[Difference]] = {}
        for difference in self.shown:
            grouped.setdefault(difference.path[:2], []).append(difference)
        order = sorted(grouped, key=lambda key: (KINDS.index(key[0]), _path_key(key)))
        return [(key, next((d for d in grouped[key] if d.path == key), None),
                 [d for d in grouped[key] if d.path != key]) for key in order]

    def summary(self) -> str:
        """``2 NameServers differ: 3 brokers missing on B, 12 topics differ``."""
        parts, all_groups = [], self.groups
        for kind in KINDS:
            groups = [(own, inner) for key, own, inner in all_groups if key[0] == kind]
            missing: dict[tuple[str, ...], int] = {}
            for own, _ in groups:
                if own is not None and own.missing_on:
                    missing[own.missing_on] = missing.get(own.missing_on, 0) + 1
            parts += [f"{_plural(n, kind)} missing on {', '.join(addrs)}" for addrs, n in missing.items()]
            changed = sum(1 for _, inner in groups if inner)
            if changed:
                parts.append(f"{_plural(changed, kind)} {'differs' if changed == 1 else 'differ'}")
        return f"{len(self.addrs)} NameServers differ: {', '.join(parts)}"

    def lines(self) -> list[str]:
        out = [self.summary()]
        for key, own, inner in self.groups:
            out.append(own.describe() if own is not None else " ".join(str(part) for part in key))
            out += [f"  {difference.describe(2)}" for difference in inner]
        return out

    def ignored_note(self, snapshots: dict[str, Snapshot]) -> str | None:
        if not self.ignored:
            return None
        fields = sorted({d.path[-1] for d in self.ignored})
        older = [f"{addr} answers as {version_name(s.version)}" for addr, s in snapshots.items()
                 if not s.sends_v5_fields]
        return (f"({_plural(len(self.ignored), 'difference')} in fields only RocketMQ 5.x sends ignored: "
                f"{', '.join(fields)}; {', '.join(older)}; --strict shows them)")


def _without_echoes(found: list[Difference]) -> list[Difference]:
    """Drop ``cluster C broker B`` where ``broker B`` itself differs the same way: one fact, one line."""
    own = {d.path: d.values for d in found if len(d.path) == 2}
    return [d for d in found
            if not (len(d.path) == 4 and d.path[0] == "cluster" and own.get(("broker", d.path[3])) == d.values)]


def _shown(value: Any) -> str:
    """A value as the JSON answer had it (``false``, not Python's ``False``)."""
    if value is MISSING:
        return "missing"
    return json.dumps(value) if isinstance(value, bool) else printable(value)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def agreement(addrs: Iterable[str], first: Snapshot) -> str:
    """The line for servers that agree, with what they agree on."""
    counts = first.counts()
    return (f"{', '.join(addrs)} agree: {_plural(counts['brokers'], 'broker')}, "
            f"{_plural(counts['topics'], 'topic')}")
