"""A broker registration worked out before it is applied: the request, its memos, and its plan.

The steps of a REGISTER_BROKER (processor.register_broker_steps) decode the broker's table and
compare it here with topicQueueTable as it is, a slice per step, producing a ``RegistrationPlan``:
the group's queue data for each topic the registration changes (``staged``: built aside, the
table's own entries untouched), the memo to keep, what the broker's live info will count.
``RouteInfoManager.apply_registration`` applies a plan in one place, in the last step (as Java's
write lock does): it hands the staged entries to topicQueueTable whole (state/settling.py), so no
step writes more than a slice of them and no lookup sees half of them.  A plan whose comparison is
stale by then (``generation`` moved: something else changed the routes meanwhile, or the rules it
assumed no longer hold) is worked out again there with the same functions.

Pure: no Twisted, and nothing here changes a table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Hashable, Iterable, Mapping
from itertools import islice, repeat
from operator import attrgetter
from typing import Any, Protocol

import msgspec

from ..bodies.register import RegisterBrokerBody, TablePieces, TopicConfig, VersionSplit, mapping_version_span
from ..bodies.register_header import RegisterBrokerHeader
from ..bodies.route import PERM_WRITE, QueueData
from ..steps import STEP_BYTES, Steps
from .queue_table import SHARD_MASK, SHARD_SHIFT, TopicQueueTable
from .settling import WALK_PER_STEP

TOPICS_PER_STEP = 1000  # staging compares and builds this many topics per step: about a millisecond
#: a joining group's slice of this many configs or more is staged in C when alike (Staging._add_alike):
#: a smaller one's checks cost about what its loop does, and a call more
ALIKE_AT_LEAST = 64
#: a registration body's bytes hashed per step (registration_digest): about a millisecond's worth
DIGEST_PER_STEP = 4 * STEP_BYTES

Channel = Hashable
#: topicQueueTable's shape: topic -> broker name -> QueueData
QueueTable = Mapping[str, Mapping[str, QueueData]]
#: what a registration writes: topic -> the group's queue data once applied (None: the group's
#: queues leave the topic).  Only the group's entry, not a copy of the topic's queues: the table's
#: entries are written in place (state/settling.py), so a registration leaves no copies to free
#: among the QueueData it keeps (copies freed after each of 3 brokers' 100k topics left 40 MB of
#: the heap in holes)
Staged = dict[str, QueueData | None]
#: the table's own entry (topic -> its queues by group) of each staged topic, in the staged
#: entries' order, as staging found them in topicQueueTable itself (None: new to it): the writing
#: sets the group's queue data in them without looking each topic up a second time
Entries = list[dict[str, QueueData] | None]
_UNSTAGED = QueueData("", 0, 0, 0, 0)  # a topic this registration has not staged (None is staged)
#: a config's numbers as its QueueData has them (perm as sent), and its topicName: read in C
_NUMBERS = attrgetter("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
_TOPIC_NAME = attrgetter("topicName")
#: TopicValidator's prefix of each 5.x broker's rmq_sys_SYNC_BROKER_MEMBER_<brokerName>, created perm 1
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"


def written_off_by_design(topics: list[str], cluster: str | None, broker_name: str | None) -> int:
    """How many of ``topics`` may lack the write bit on a healthy broker of group ``broker_name`` in
    ``cluster``: Java's TopicConfigManager.init creates the member-sync topic with PERM_INHERIT
    alone, and the topic named after the broker or exactly after its cluster so when
    brokerTopicEnable / clusterTopicEnable are off.  Such a topic says nothing about whether the
    group takes writes: its queues without the write bit are not counted among the group's topics
    (``RouteInfoManager.sealedOfGroup``; system_topics.py).  The one statement of the rule, for a
    list so that a registration's topics are tested in C (no call a topic: ``Staging.add``)."""
    prefixed = sum(map(str.startswith, topics, repeat(SYNC_BROKER_MEMBER_GROUP_PREFIX)))
    return prefixed + sum(topics.count(named) for named in {cluster, broker_name}
                          if named is not None and not named.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX))


def write_off_by_design(topic: str, cluster: str | None = None, broker_name: str | None = None) -> bool:
    """Whether ``topic`` may lack the write bit by design (``written_off_by_design``)."""
    return written_off_by_design([topic], cluster, broker_name) > 0


class RegistrationMemo(msgspec.Struct, frozen=True, gc=False):
    """A body a broker sent whose every topic topicQueueTable holds as that body says: its digest
    (the same body again, whatever its dataVersion, changes nothing), the topics it holds, and how
    it was cut (big plain JSON tables: a piece sent again unchanged is not decoded).

    A broker keeps one per body applied in full (``Memos``): one for a table sent in one frame,
    one per piece for a table sent in pieces (5.x ``enableSplitRegistration``).  Replaced, never
    changed, and forgotten when anything else changes the broker's queues: a registration in
    steps knows nothing touched them meanwhile when the memos it started from are still the ones
    (``is``).  Like the other values a registration makes and keeps (TopicRules, routes.Renewable,
    the answer cache's RenewalKey and KeptRenewal), a frozen msgspec Struct: made in C, and not
    tracked by the collector (a frozen dataclass set each field through object.__setattr__)."""

    digest: bytes
    pieces: TablePieces | None = None
    topicCount: int = 0


#: a broker's memos, oldest first (a tuple: most brokers send one body, and thousands of them
#: each holding a dict of one cost a megabyte more); replaced, never changed
Memos = tuple[RegistrationMemo, ...]


def memo_of(memos: Memos, digest: bytes | None) -> RegistrationMemo | None:
    """The memo of the body whose digest is ``digest``, if ``memos`` hold it."""
    return next((memo for memo in memos if memo.digest == digest), None)


def digests(memos: Memos) -> Collection[bytes]:
    """The digests of ``memos``, for a decoder to recognise a body it may skip."""
    found = [memo.digest for memo in memos]
    return frozenset(found) if len(found) > 8 else found


class RegisterRequest(msgspec.Struct):
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
    #: what tells this request from another (registration_digest), kept with the broker
    #: once applied: the same again renews it (RouteInfoManager.renew); None: not kept
    digest: bytes | None = None


#: a registration's header fields as registration_digest hashes them
_FIELDS_ENCODER = msgspec.json.Encoder()


def registration_digest(revision: int, version: int, ext: Mapping[str, str | None],
                        body: bytes | memoryview | None, split: VersionSplit | None = None) -> Steps[bytes]:
    """What tells a REGISTER_BROKER from another as its registration reads it: its header's
    fields (``ext``) but the opaque (every request has its own) and bodyCrc32 (checked against the
    body before), its MQVersion, its body but 5.x's mappingDataVersion (a new timestamp in every
    one, read by nobody: bodies/register.py's mapping_version_span), hashed in steps when big, and
    the configuration's ``revision`` (the limits it was checked under).  Two with one digest are
    applied alike: the broker keeps it, and the same again renews it (RouteInfoManager.renew).
    ``split``: the JSON body's dataVersion apart from the digest of the rest (bodies/register.py's
    split_data_version, the table's memo digest): its text and that digest stand for the body,
    which is then not hashed a second time.  The server's handler (processor.register_broker_steps)
    and the capture's replay (spark_analysis/analysis/replay.py) compute it here.  A SHA-1, as the
    table's memos.  The fields are hashed as JSON (msgspec's, in C: their repr was 14k of a first
    registration's 0.9 M instructions), or as their repr where JSON cannot hold them (a lone
    surrogate), that form tagged apart."""
    if split is not None:
        return split_registration_digest(revision, version, ext, split)
    digest = _fields_digest(revision, version, ext, "")
    data = memoryview(body or b"")
    span = mapping_version_span(data) if data else None
    if span is not None:
        digest.update(data[:span[0]])
        data = data[span[1]:]
    for start in range(0, len(data), DIGEST_PER_STEP):
        digest.update(data[start:start + DIGEST_PER_STEP])
        if len(data) > DIGEST_PER_STEP:
            yield
    made: bytes = digest.digest()
    return made


def split_registration_digest(revision: int, version: int, ext: Mapping[str, str | None], split: VersionSplit) -> bytes:
    """``registration_digest`` of a JSON body with its ``split``, which takes no step: at once (a
    first registration's, processor.register_fused: no generator made and run for it)."""
    digest = _fields_digest(revision, version, ext, "split ")
    digest.update(b" %d %s%s" % (len(split.text), split.text, split.digest))  # (one update: the three as they were)
    made: bytes = digest.digest()
    return made


def _fields_digest(revision: int, version: int, ext: Mapping[str, str | None], tag: str) -> Any:
    """``registration_digest``'s SHA-1 of the header's fields, its first part (``tag``: its form)."""
    fields = dict(ext)  # in its order, as sent, but for bodyCrc32
    fields.pop("bodyCrc32", None)
    try:  # (two forms, tagged: neither's input is ever the other's)
        digest = hashlib.sha1(f"{tag}{revision} {version} ".encode())
        digest.update(_FIELDS_ENCODER.encode(fields))
    except UnicodeEncodeError:  # (the JSON form begins with the tag or a digit, never "repr ")
        digest = hashlib.sha1(f"repr {tag}{revision} {version} {fields!r}".encode("utf-8", "backslashreplace"))
    return digest


def request_of(header: RegisterBrokerHeader, names: tuple[str, str, str], broker_id: int, body: RegisterBrokerBody,
               channel: Channel | None, version: int, per_broker_timeout: bool,
               digest: bytes | None = None) -> RegisterRequest:
    """A REGISTER_BROKER as the routes apply it, from its header read by Java's rules, its names
    (header.names), its brokerId as a Java long and its decoded body; ``per_broker_timeout``: the
    generation reads the broker's own heartbeatTimeoutMillis (Profile.per_broker_heartbeat_timeout).
    The server's handler and the capture's replay (spark_analysis/analysis/replay.py) build it here."""
    cluster, addr, name = names
    return RegisterRequest(
        clusterName=cluster, brokerAddr=addr, brokerName=name, brokerId=broker_id, haServerAddr=header.haServerAddr,
        body=body, channel=channel, zoneName=header.zoneName,
        heartbeatTimeoutMillis=header.heartbeatTimeoutMillis if per_broker_timeout else None,
        enableActingMaster=header.enableActingMaster, version=version, digest=digest)


class TopicRules(msgspec.Struct, frozen=True, gc=False):
    """How a registration applies its table to topicQueueTable, as Java's registerBroker decides
    before its loop over the topics (RouteInfoManager.topic_rules works them out from the tables).

    ``applies``: the broker is a master, or 5.x's prime slave: its table applies at all.
    ``every_topic``: a first registration or a new dataVersion: every topic of the table is
    written; else 5.x writes only those the group lacks, 4.9.8 none (``all_or_none``).
    ``read_only``: a prime slave of an acting-master group: written without the write perm.
    ``remove_absent``: 5.x deleteTopicWithBrokerRegistration, without queue mappings: the group's
    topics the table lacks leave it.
    ``cluster``: the group's cluster as brokerAddrTable holds it (the request's for a new group),
    whose named topic may lack the write bit by design (``write_off_by_design``)."""

    applies: bool
    every_topic: bool = False
    all_or_none: bool = False
    read_only: bool = False
    remove_absent: bool = False
    cluster: str = ""


class RegistrationPlan(msgspec.Struct):
    """What a registration will do, worked out from topicQueueTable as of ``generation`` under
    ``rules`` (None: nothing worked out; the manager works it out when it applies).

    ``staging``: the entries topicQueueTable will hold for each topic it changes, with what they
    add, remove and change (``Staging``), handed to the manager as staged (its own while they
    hold: no copy of its fields made between the plan and its applying).  ``memo``: kept for the
    broker if complete.  ``topicCount``: the broker's live info counts this many topics (the
    memo's when unchanged)."""

    request: RegisterRequest
    generation: int
    rules: TopicRules | None = None
    staging: Staging | None = None
    memo: RegistrationMemo | None = None
    topicCount: int = 0


class QueueView(Protocol):
    """topicQueueTable as of the last change, to look topics up in."""

    def get(self, topic: str, /) -> Mapping[str, QueueData] | None: ...


class Tables(Protocol):
    """What a plan reads of RouteInfoManager: the table as of the last change, what is still to be
    written into it, its generation, the rules."""

    def queue_view(self) -> QueueView: ...

    @property
    def topicQueueTable(self) -> QueueTable: ...

    @property
    def settling(self) -> int: ...

    @property
    def generation(self) -> int: ...

    def topic_rules(self, request: RegisterRequest) -> TopicRules: ...

    @property
    def topicsOfGroup(self) -> Mapping[str, int]:
        """The topics of the table as of the last change holding each group's queues (a group
        holding none is not in it)."""


def plan_of(request: RegisterRequest, generation: int) -> RegistrationPlan:
    """A plan with nothing worked out yet: its memo and its count, from the body alone."""
    body = request.body
    count = len(body.topicConfigTable) + body.tableSkipped
    memo = RegistrationMemo(body.tableDigest, body.tablePieces, count) if body.tableDigest is not None else None
    return RegistrationPlan(request, generation, memo=memo, topicCount=count)


def plan_steps(request: RegisterRequest, routes: Tables) -> Steps[RegistrationPlan]:
    """The plan of a registration: its table compared with topicQueueTable and its entries staged,
    a slice per step. Between steps the routes may change: the plan then says so by its
    generation, and the manager works it out again when it applies."""
    generation = routes.generation
    plan = plan_of(request, generation)
    if request.body.tableUnchanged:
        return plan
    rules = routes.topic_rules(request)
    table = routes.queue_view()
    staging = Staging(request.brokerName, rules, joins=request.brokerName not in routes.topicsOfGroup)
    configs = request.body.topicConfigTable.values()
    if len(configs) <= TOPICS_PER_STEP:  # one step's: staged at once, no yield
        if rules.applies and configs:
            staging.add(table, configs)
    else:
        pieces = iter(configs)
        while rules.applies and (piece := list(islice(pieces, TOPICS_PER_STEP))):
            staging.add(table, piece)
            yield
    if rules.applies and rules.remove_absent:
        if routes.settling or routes.generation != generation:
            return plan  # the walk needs the table itself: the manager works it out when it applies
        items = iter(routes.topicQueueTable.items())
        while routes.generation == generation and (entries := list(islice(items, WALK_PER_STEP))):
            staging.remove_absent(entries, request.body.topicConfigTable)
            yield  # a walk of topicQueueTable: in slices, as the rest
        if routes.generation != generation:
            return plan  # stale: the manager works it out again, in one go
    plan.rules, plan.staging = rules, staging
    return plan


def stage_all(request: RegisterRequest, view: QueueView, table: QueueTable, rules: TopicRules,
              joins: bool = False) -> Staging:
    """The staging of plan_steps, in one go (a plan that was stale when it applied): compared with
    ``view`` (the table as of the last change); the absent topics looked for in ``table`` (the
    table itself, everything written in); ``joins``: no topic of ``view`` holds the group."""
    staging = Staging(request.brokerName, rules, joins)
    if rules.applies:
        staging.add(view, request.body.topicConfigTable.values())
        if rules.remove_absent:
            staging.remove_absent(table.items(), request.body.topicConfigTable)
    return staging


class Staging:
    """The entries one broker's registration writes into topicQueueTable, built aside: the group's
    new QueueData for a topic (or None: out of it), so the table's own entries stay as they are
    until the plan applies.

    ``joins``: no topic of the table holds the group (a first registration of its first member:
    the caller knows it from topicsOfGroup, counted as each change commits).  Then every topic
    its table lists is one the group lacks, whether the table holds the topic or not, so nothing
    is looked up in topicQueueTable here: the writing looks each topic up once as it writes it
    (settling.Staged), where staging would have looked it up a first time (a few cache misses
    each in a table of a million: most of staging's time).  A slice of topics with alike numbers
    (most tables') is then staged in C, without a Python loop."""

    __slots__ = ("broker_name", "rules", "staged", "complete", "overwrites", "added", "removed", "writable",
                 "sealed", "shared", "longest", "entries", "joins")

    def __init__(self, broker_name: str, rules: TopicRules, joins: bool = False) -> None:
        self.broker_name = broker_name
        self.rules = rules
        self.joins = joins
        self.staged: Staged = {}
        self.complete = True
        self.overwrites = False
        self.added = 0  # entries of the group new to the table
        self.removed = 0  # entries of the group leaving it
        #: how the group's entries with the write bit change, and those without it on a topic
        #: write_off_by_design (counted as staged, like added and removed)
        self.writable = 0
        self.sealed = 0
        #: the QueueData staged for each (readQueueNums, writeQueueNums, perm, topicSysFlag): one for
        #: all the topics that have them (100k topics of one group: one or a few, not 100k)
        self.shared: dict[tuple[int, int, int, int], QueueData] = {}
        self.longest = 0  # the longest staged topic name (maxNameLength), measured as it is staged
        #: the table's entry of each staged topic (``Entries``) while every one was looked up in
        #: topicQueueTable itself, one per staged topic; None once not (a view through what is
        #: still to be written, a topicName staged twice, or nothing looked up: ``joins``)
        self.entries: Entries | None = [] if not joins else None

    def add(self, table: QueueView, configs: Collection[TopicConfig]) -> None:
        """Java's createAndUpdateQueueData for each config the rules let through, where it changes
        anything.  When the group joins, a big slice of alike configs in C (``_add_alike``); else
        one tight loop, as a table holds up to 100k topics: topicQueueTable's dicts indexed here
        (``SHARD_MASK``), none looked up when the group ``joins``; the counts kept in locals, and
        the QueueData of the topic before reused while the numbers are the same (most of a
        table's are)."""
        if (self.joins and len(configs) >= ALIKE_AT_LEAST and (self.rules.every_topic or not self.rules.all_or_none)
                and self._add_alike(list(configs))):
            return
        name, staged, rules, shared = self.broker_name, self.staged, self.rules, self.shared
        every, read_only, lookup, in_staged = rules.every_topic, rules.read_only, table.get, staged.get
        joins = self.joins
        shards = table.shards if type(table) is TopicQueueTable else None  # looked up in its dicts, no call
        shift, mask = SHARD_SHIFT, SHARD_MASK
        none_applies = not every and rules.all_or_none  # 4.9.8 with its dataVersion unchanged
        longest, added, last, queue = self.longest, 0, None, _UNSTAGED
        # the write bit's count: an entry added has it but those of a run of numbers without it
        # (``writes``: rare but for a read-only prime slave's); one replacing an entry that had it
        # changes nothing but when it has not (``regained`` counts the replaced ones without it: an
        # overwrite of writable entries, most, counts nothing); the topics of the entries without it
        # are kept (``off``, ``back``: those they replace) and tested after the loop, in C
        # (written_off_by_design: a call a topic was about 1,100 instructions)
        regained, unwritable, writes, write_bit = 0, 0, True, PERM_WRITE
        off: list[str] = []
        back: list[str] = []
        if not isinstance(table, TopicQueueTable) or joins:
            self.entries = None  # a view's entries are not the table's; joining, none looked up
        entries = self.entries if self.entries is not None else []
        keep = entries.append
        held: Any = None  # the table's own entry (a dict) when the table is a TopicQueueTable
        try:
            for config in configs:
                topic = config.topicName
                old = in_staged(topic, _UNSTAGED)  # a second config of the same topicName: after the first
                if old is _UNSTAGED:
                    if joins:
                        old = None  # the group holds no topic: the writing looks it up
                    elif held := (shards[hash(topic) >> shift & mask].get(topic) if shards is not None
                                  else lookup(topic)):
                        old = held.get(name)
                    else:
                        old = held = None  # new to the table (the writing names it: settling.Staged)
                else:
                    self.entries = None  # staged twice: its entry in the order of its first staging
                perm = config.perm & ~PERM_WRITE if read_only else config.perm
                if old is None:
                    if none_applies:
                        self.complete = False
                        continue
                    added += 1
                elif (old.readQueueNums == config.readQueueNums and old.perm == perm
                        and old.writeQueueNums == config.writeQueueNums and old.topicSysFlag == config.topicSysFlag):
                    continue
                elif not every:  # Java leaves it as held: this table is not what the group holds
                    self.complete = False
                    continue
                else:
                    self.overwrites = True
                    if not old.perm & write_bit:
                        regained += 1
                        back.append(topic)
                numbers = (config.readQueueNums, config.writeQueueNums, perm, config.topicSysFlag)
                if numbers != last:
                    found = shared.get(numbers)
                    if found is None:
                        found = shared[numbers] = QueueData(name, *numbers)
                    last, queue, writes = numbers, found, bool(perm & write_bit)
                staged[topic] = queue
                keep(held)
                if not writes:
                    unwritable += 1
                    off.append(topic)
                if len(topic) > longest:
                    longest = len(topic)
        finally:
            self.longest = longest
            self.added += added
            self.writable += added + regained - unwritable
            if off or back:
                cluster = rules.cluster
                self.sealed += written_off_by_design(off, cluster, name) - written_off_by_design(back, cluster, name)

    def _add_alike(self, configs: list[TopicConfig]) -> bool:
        """``configs`` of a group that joins (every one is added) staged in C, with no Python loop
        over them, when they share their numbers and no topicName comes twice nor was staged
        before; False (nothing staged) otherwise.  (Looking each topic up in C when the group
        does not join was no faster than the loop: the look-ups' cache misses are its time.)"""
        numbers = set(map(_NUMBERS, configs))
        if len(numbers) != 1:
            return False
        names = list(map(_TOPIC_NAME, configs))
        piece = dict.fromkeys(names)
        if len(piece) != len(names) or not self.staged.keys().isdisjoint(piece):
            return False  # a topicName twice: staged one by one, the second compared with the first
        reads, writes, perm, flag = numbers.pop()
        if self.rules.read_only:
            perm &= ~PERM_WRITE
        found = self.shared.get((reads, writes, perm, flag))
        if found is None:
            found = self.shared[reads, writes, perm, flag] = QueueData(self.broker_name, reads, writes, perm, flag)
        self.staged.update(zip(names, repeat(found)))
        self.added += len(names)
        if perm & PERM_WRITE:
            self.writable += len(names)
        else:
            self.sealed += written_off_by_design(names, self.rules.cluster, self.broker_name)
        self.longest = max(self.longest, max(map(len, names)))
        return True

    def remove_absent(self, entries: Iterable[tuple[str, Mapping[str, QueueData]]],
                      table: Mapping[str, TopicConfig]) -> None:
        """deleteTopicWithBrokerRegistration: of ``entries`` (topicQueueTable's), the group's
        topics its table lacks lose the group's queues (a topic left without any leaves)."""
        name, staged = self.broker_name, self.staged
        for topic, held in entries:
            if name in held and topic not in table:
                if self.entries is not None:  # removed as before, by its topic: the entry is looked up
                    if topic in staged:
                        self.entries = None
                    else:
                        self.entries.append(None)
                staged[topic] = None
                self.overwrites = True
                self.removed += 1
                if held[name].perm & PERM_WRITE:
                    self.writable -= 1
                elif write_off_by_design(topic, self.rules.cluster, name):
                    self.sealed -= 1
                self.longest = max(self.longest, len(topic))
