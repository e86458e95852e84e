"""A broker registration worked out before it is applied: the request, its memo, and its plan.

The steps of a REGISTER_BROKER (processor.register_broker_steps) decode the broker's table and
compare it here with topicQueueTable as it is, a slice per step, producing a ``RegistrationPlan``:
the topics to add or change, those to remove, the memo to keep, what the broker's live info will
count.  ``RouteInfoManager.apply_registration`` applies a plan in one place, in the last step (as
Java's write lock does); a plan whose comparison is stale by then (``generation`` moved: something
else changed the routes meanwhile) is compared again there with the same functions.

Pure: no Twisted, and nothing here changes a table.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from itertools import islice

from ..bodies.register import RegisterBrokerBody, TablePieces, TopicConfig
from ..bodies.register_header import RegisterBrokerHeader
from ..bodies.route import MASTER_ID, QueueData
from ..steps import Steps

TOPICS_PER_STEP = 2000  # compare_steps: about a millisecond

Channel = Hashable
#: topicQueueTable's shape: topic -> broker name -> QueueData
QueueTable = Mapping[str, Mapping[str, QueueData]]


@dataclass(frozen=True, slots=True)
class RegistrationMemo:
    """What a broker's table last applied in full was: its digest (the same body again changes
    nothing) and how it was cut (big plain JSON tables: a piece sent again unchanged is not decoded).

    Replaced, never changed, and forgotten when anything else changes the broker's queues: a
    registration in steps knows nothing touched them meanwhile when the memo it started from is
    still the one (``is``)."""

    digest: bytes
    pieces: TablePieces | None = None


@dataclass(slots=True)
class RegisterRequest:
    """A REGISTER_BROKER's header fields and decoded body."""

    clusterName: str
    brokerAddr: str
    brokerName: str
    brokerId: int
    haServerAddr: str | None
    body: RegisterBrokerBody
    channel: Channel | None = None
    zoneName: str | None = None
    heartbeatTimeoutMillis: int | None = None
    enableActingMaster: bool | None = None  # None: an old-version broker that did not say
    version: int | None = None  # the request's MQVersion ordinal


def request_of(header: RegisterBrokerHeader, names: tuple[str, str, str], broker_id: int, body: RegisterBrokerBody,
               channel: Channel | None, version: int, per_broker_timeout: bool) -> RegisterRequest:
    """A REGISTER_BROKER as the routes apply it, from its header read by Java's rules, its names
    (header.names), its brokerId as a Java long and its decoded body; ``per_broker_timeout``: the
    generation reads the broker's own heartbeatTimeoutMillis (Profile.per_broker_heartbeat_timeout).
    The server's handler and the capture's replay (spark_analysis/analysis/replay.py) build it here."""
    cluster, addr, name = names
    return RegisterRequest(
        clusterName=cluster, brokerAddr=addr, brokerName=name, brokerId=broker_id, haServerAddr=header.haServerAddr,
        body=body, channel=channel, zoneName=header.zoneName,
        heartbeatTimeoutMillis=header.heartbeatTimeoutMillis if per_broker_timeout else None,
        enableActingMaster=header.enableActingMaster, version=version)


@dataclass(slots=True)
class RegistrationPlan:
    """What a registration will do, worked out from topicQueueTable as of ``generation``.

    ``changes``: the table's configs whose queue data differ (added or changed topics); None when
    not compared (the table is unchanged, or nobody compared it: the manager compares when it
    applies).  ``removals``: this broker's topics absent from the table, for
    deleteTopicWithBrokerRegistration; None when not worked out.  ``memo``: kept as the broker's
    memo if the whole table applies.  ``topicCount``: the broker's live info counts this many
    topics (the previous count when the table is unchanged)."""

    request: RegisterRequest
    generation: int
    changes: list[TopicConfig] | None = None
    removals: list[str] | None = None
    memo: RegistrationMemo | None = None
    topicCount: int = 0


def plan_of(request: RegisterRequest, generation: int) -> RegistrationPlan:
    """A plan with nothing compared yet: its memo and its count, from the body alone."""
    body = request.body
    memo = RegistrationMemo(body.tableDigest, body.tablePieces) if body.tableDigest is not None else None
    return RegistrationPlan(request, generation, memo=memo, topicCount=len(body.topicConfigTable) + body.tableSkipped)


def plan_steps(request: RegisterRequest, queues: QueueTable, generation: int,
               remove_absent: bool) -> Steps[RegistrationPlan]:
    """The plan of a registration, the table compared with ``queues`` (topicQueueTable as of
    ``generation``) a slice per step; ``remove_absent``: also list this broker's topics the table
    lacks (deleteTopicWithBrokerRegistration, when its mapping info is empty).  The caller must not
    change ``queues`` between steps without moving its generation."""
    plan = plan_of(request, generation)
    body = request.body
    if body.tableUnchanged:
        return plan
    name, configs, changes = request.brokerName, iter(body.topicConfigTable.values()), []
    while piece := list(islice(configs, TOPICS_PER_STEP)):
        changes += changed_configs(queues, name, piece)
        yield
    plan.changes = changes
    may_apply = request.brokerId == MASTER_ID or request.enableActingMaster is not None  # a master or prime slave
    if remove_absent and may_apply and not body.topicQueueMappingInfoMap:
        plan.removals = absent_topics(queues, name, body.topicConfigTable)
        yield  # a scan of topicQueueTable: a step of its own, not the application's
    return plan


def changed_configs(queues: QueueTable, broker_name: str, configs: Iterable[TopicConfig]) -> list[TopicConfig]:
    """The configs whose queue data for ``broker_name`` would change: a re-registration then
    touches topicQueueTable and the answer cache only where it differs. One tight loop, as a
    table holds up to 100k topics."""
    out = []
    for config in configs:
        held = queues.get(config.topicName)
        old = held.get(broker_name) if held else None
        if (old is None or old.readQueueNums != config.readQueueNums or old.perm != config.perm
                or old.writeQueueNums != config.writeQueueNums or old.topicSysFlag != config.topicSysFlag):
            out.append(config)
    return out


def absent_topics(queues: QueueTable, broker_name: str, table: Mapping[str, TopicConfig]) -> list[str]:
    """The topics holding ``broker_name``'s queues that its table no longer lists, in
    topicQueueTable's order."""
    return [topic for topic, held in queues.items() if broker_name in held and topic not in table]
