"""Answers kept in memory: the one owner of every encoded answer the server reuses, dropped
exactly when the state it was built from says what changed.

Clients repeat the same route lookup every 30 s with a new opaque (load tools far more often),
and admin tools ask for whole tables; encoding is the expensive part and the tables change far
less often.  Four levels:

- route bodies, per topic and variant (standard JSON or not, orderTopicConf; or the zone a lookup
  is filtered by, each zone a peer names one more body, counted as any in MAX_ROUTES_BYTES);
- whole-table bodies (cluster info, the topic list), each tied to what it shows: brokers or topics;
- whole answer frames to plain JSON route lookups, kept around the opaque and served without
  decoding (``replies_from_memory``; a client's repeats at the start of a read, before the read is
  even cut into frames: ``replies_from_read``) while their topic's bodies are still kept, and only
  when the request's bytes alone decide its answer (not when the ACL checks lookups by peer);
- a broker's answer to the registration last applied in full (or renewed) on its connection,
  kept around the opaque with the SHA-1 of the request's bytes but its opaque, bodyCrc32 and 5.x
  mappingDataVersion stamp, and where those lie (a frame of its length is read there, not looked
  through): the same registration again (a heartbeat), its CRC checked, renews the
  broker by RouteInfoManager.renew's rule and is answered without decoding
  (``renewal_from_memory``), as long as the answer shows what it showed.  As for a lookup answered
  from memory, the dispatcher's observers do not hear it.

One owner, one thing kept (an answer's bytes, dropped by the same subscriptions), met at three
points of a request's way because each serves traffic the next cannot: a read of repeats only
(``replies_from_read``, the common case), frames of a read that mixes repeats with anything else
(``replies_from_memory``, after cutting), and a lookup never seen whole (the handler builds its
frame around a kept body).  Taking the first away (in process, ``tools/bench/hot_path.py``) made a
lookup cost about 2.3x the CPU; taking the first two, about 50x.

What is kept comes from the dispatcher (``keep_route``: a route answer, with the topic and variant its
handler worked out; ``keep_renewal``: a registration's answer) and from the handlers' read-through
``table``.  What is dropped comes from subscriptions, never from handlers (and a connection's kept
registration answer with the connection: the dispatcher's ``forget_channel``, or when it no longer
renews); the composition root (service.py) subscribes the cache, which subscribes itself to nothing:

- RouteInfoManager publishes each change once it is complete (``changed``, a ``RouteChange``):
  its topics (drop their bodies and the topic list), its broker groups (drop every kept route
  naming one of them, in one walk of what is kept, and the cluster info), or everything.  While
  the cache holds nothing (``holds``), changes are not collected topic by topic, so a first
  registration of many topics on a fresh server collects nothing per topic.
- KVConfigManager publishes each key put or deleted (``kv_changed``): an ORDER_TOPIC_CONFIG key
  is a topic's orderTopicConf, so that topic's routes go, and the kept registration answers (which
  may carry the whole ORDER_TOPIC_CONFIG table).
- NamesrvConfig publishes an update (``config_changed``): switches shape answers, so every kept
  answer goes (not the header templates below).

``keep=False`` keeps nothing: the reference the differential tests compare against.

The same owner keeps the work of decoding: JSON header templates (remoting/header.py:
``HeaderTemplates``, ``headers``), the request side of the same idea (a client's requests differ
only in their opaque).  A template never goes stale (a header's fields are its bytes'), so no
subscription drops one; they are bounded by count.  One server, one cache of each, constructed
once by the composition root (service.py); no module holds one.
"""

from __future__ import annotations

import hashlib
import re
import struct
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from .bodies.register import VERSIONS_WITHIN, WHOLE_TAG, WholeSplit, mapping_version_span, version_spans
from .bodies.route import topic_route_bean
from .cluster_info import ClusterInfoPieces
from .remoting import JSON_SERIALIZE, RemotingCommand, fastjson
from .remoting.crc import crc32_masked_steps
from .remoting.header import KEPT_HEADER_MAX, OPAQUE_KEY, SERVER_TEMPLATES_SIZE, HeaderTemplates
from .route_pieces import RoutePieces
from .state.alike import Alike
from .state.kv import NAMESPACE_ORDER_TOPIC_CONFIG
from .state.routes import (
    BROKER,
    TOPIC,
    Channel,
    Renewable,
    RouteChange,
    RouteData,
    RouteInfoManager,
    SystemTopicListShown,
)
from .steps import STEP_BYTES, Steps, run_steps
from .zone_routes import ZoneRoutes

#: answer frames kept before starting over (one per client variant of a lookup)
MAX_REPLIES = 65536

#: kept answer frames per request up to the opaque's digits (clients that differ only after them)
MAX_REPLIES_PER_HEAD = 8

#: the bytes the kept answer frames may hold (their requests' and answers' headers: a frame's body is
#: its topic's kept route body, shared), about what MAX_REPLIES of Java clients' lookups take (56 MB:
#: 300-byte requests): any peer chooses the requests' bytes, and 65,536 of KEPT_HEADER_MAX are 256 MiB
MAX_REPLIES_BYTES = 64 << 20
#: what a kept frame holds beside its bytes (its Reply, its bytes objects, its place in a list), and
#: a request's start beside its bytes (its place in ``replies``): counted into MAX_REPLIES_BYTES
REPLY_OVERHEAD, HEAD_OVERHEAD = 200, 100
#: the answer frames' ends (header end and body, joined) a topic keeps (``TopicAnswers.rests``): the
#: header's end is the server's (one per variant in practice); past this, a new one keeps no frame, so
#: a peer cannot make a topic's body be copied more than this many times
MAX_RESTS_PER_TOPIC = 4
#: what an answer end holds beside its bytes (its bytes object, its key, its place in ``rests``):
#: counted into MAX_REPLIES_BYTES when it is made
REST_OVERHEAD = 150

#: the bytes the kept route bodies may hold, past which they start over (the answer frames' ends
#: joined of them, ``rests``, count against MAX_REPLIES_BYTES with the frames that hold them): a
#: body names every group serving its topic (about 200 bytes each), kept per topic and variant, so
#: any peer that may register many groups on the same topics and looks each topic up in both
#: variants makes it hold far more than the tables (500 groups on 2,000 topics, 26 MB of tables,
#: kept 780 MB; at maxTopicQueueEntries about 6 GB); 256 MiB holds the bodies of about 300,000
#: topics on two groups, in both variants
MAX_ROUTES_BYTES = 256 << 20
#: what a kept topic holds beside its bodies (its TopicAnswers, its dicts, its place in ``routes``),
#: and a body beside its bytes: counted into MAX_ROUTES_BYTES
TOPIC_OVERHEAD, PIECE_OVERHEAD = 600, 100

#: the bytes the kept GET_TOPICS_BY_CLUSTER lists may hold together, past which they start over: a
#: list per cluster asked for, each up to every topic's name, and a peer that may register makes
#: clusters (20,000 at maxBrokerGroups; 200 of them serving the same 2,000 topics named in 500
#: characters kept 200 MB of lists, 4,000 would keep 4 GB); two lists of a million topics fit
MAX_CLUSTER_LISTS_BYTES = 64 << 20

#: the kept caches that start over past a bound (``AnswerCache.started_over``): the route bodies
#: (MAX_ROUTES_BYTES), the answer frames (MAX_REPLIES_BYTES, MAX_REPLIES) and the clusters' topic
#: lists (MAX_CLUSTER_LISTS_BYTES)
KEPT_CACHES = ("routes", "replies", "cluster_lists", "route_pieces", "zone_routes")

#: what a kept cluster list holds beside its body (its key, its place in the tables): counted in it
CLUSTER_LIST_OVERHEAD = 200

#: the largest registration answer kept for its broker's connection (keep_renewal): one without
#: the order topics' table is about 120 bytes; 5,000 brokers keep at most 5 MiB of them
MAX_RENEWAL_ANSWER = 1024
#: distinct answer pieces the kept renewals share (AnswerCache._pieces); past it, they start again
ALIKE_PIECES = 4096



class TopicAnswers:
    """One topic's kept route bodies, by variant; ``stale`` once the topic is dropped, which is
    how the answer frames kept from them (``Reply.answers``) know not to be served.  ``rests``: the
    answer frames' ends, each an answer header's end after the opaque and a body, joined once, by
    (variant, that header end): every client's kept frame of the topic shares one (at most
    MAX_RESTS_PER_TOPIC of them), so an answer from memory joins no header and body per call.
    They exist for the kept frames only, so they count against the frames' MAX_REPLIES_BYTES
    (``AnswerCache._keep_reply``) and go when the frames start over."""

    __slots__ = ("bodies", "rests", "stale", "size")

    def __init__(self) -> None:
        self.bodies: dict[Hashable, bytes] = {}
        self.rests: dict[tuple[Hashable, bytes], bytes] = {}
        self.stale = False
        #: what it holds, counted into MAX_ROUTES_BYTES
        self.size = TOPIC_OVERHEAD


@dataclass(frozen=True, slots=True)
class Reply:
    """A kept answer frame to one client's plain JSON route lookup, around its opaque."""

    size: int  #: the request's length from its opaque's digits on
    after: bytes  #: the request after the digits
    digits: int  #: how many digits the opaque had
    answers: TopicAnswers  #: its topic's bodies: stale, the frame is not served
    prefix: bytes  #: the answer frame up to its opaque's digits
    #: the answer after them, its header's end and its body: its topic's (``TopicAnswers.rests``),
    #: the same object for every client (not a copy)
    rest: bytes
    tail: int  #: the length of its header's end in ``rest``

    def weight(self) -> int:
        """What it counts against MAX_REPLIES_BYTES (its ``rest`` is its topic's, counted once when
        made, ``AnswerCache._keep_reply``; its header's end is counted for each, as when each frame
        kept its own)."""
        return len(self.after) + len(self.prefix) + self.tail + REPLY_OVERHEAD

class KeptRenewal(msgspec.Struct, frozen=True, gc=False):
    """A broker's answer to the registration it sent last on its connection, around its opaque:
    served again to the same registration (``renewal_from_memory``)."""

    digest: bytes  #: the request's ``renewal_key_steps``
    renewal: Renewable  #: what RouteInfoManager.renew_again renews the broker with
    head: bytes  #: the answer's header up to its opaque's digits
    rest: bytes  #: the answer after them (its header's end, its body)
    header_length: int  #: the answer header's length but the opaque's digits
    #: a big request's bodyCrc32 when the same bytes send the same one (``RenewalKey.same_crc``):
    #: another CRC tells a changed registration before its bytes are hashed; None otherwise
    crc: int | None = None
    #: where the request's key was read (``RenewalKey.shape``): the next of its length is read there;
    #: shared, as the answer's pieces, by the brokers whose frames are laid out alike
    shape: bytes = b""


class Unread:
    """A registration's key not worked out yet (``keep_renewal`` reads it then)."""


UNREAD = Unread()


class RenewalKey(msgspec.Struct, frozen=True, gc=False):
    """What tells a broker's registration from its last one (``renewal_key_steps``)."""

    at: int  #: where the opaque's digits start
    digits: int  #: how many
    crc: int  #: its bodyCrc32 as sent (0: none, no check)
    body: int  #: where its body starts
    digest: bytes  #: SHA-1 of the rest
    #: no 5.x mappingDataVersion stamp in its body: the same registration sends the same bodyCrc32
    same_crc: bool = False
    #: where it was read (``_SHAPE``): a heartbeat of the same length is read there, not looked through
    shape: bytes = b""


_PREFIX = struct.Struct(">iI")
_LENGTH = struct.Struct(">i")
_OPAQUE_AT = len(OPAQUE_KEY)
_CRC_KEY = b'"bodyCrc32":"'
_DIGITS = re.compile(rb"\d+")
_MAX_INT32 = b"2147483647"
#: a registration frame's shape as its key was read (``RenewalKey.shape``, 40 bytes): its length, where
#: its header ends, and the start and end of its opaque's digits, of its bodyCrc32's (none: an empty
#: span at the header's end), of its body's 5.x mappingDataVersion (none: one at the frame's end) and
#: of its body's dataVersion object in a key of the split form (else -1, -1: ``renewal_key_steps``)
_SHAPE = struct.Struct(">10i")
#: what ``renewal_key_steps`` hashes first: the header's bytes hashed, and the stretches' lengths
_LAYOUT = struct.Struct(">5i")
#: what a key of the split form hashes last (``_split_tail``): the header's bytes hashed, the body's
#: after its versions, its dataVersion's, and the header's three stretches' lengths
_SPLIT_LAYOUT = struct.Struct(">6i")

#: pipelined lookups in one read from which they are spliced as one block (_splice_block)
BLOCK_FROM = 4
#: no limit on the bytes of answers one call appends (the server gives one: server.ANSWER_ROOM)
NO_LIMIT = sys.maxsize


class AnswerCache:
    """The kept answers of one NameServer (module docstring); ``routes`` is read (which kept
    routes name a changed group), never subscribed to from here."""

    def __init__(self, routes: RouteInfoManager, keep: bool = True) -> None:
        self._routes = routes
        self.keep = keep
        self.routes: dict[str, TopicAnswers] = {}
        #: what the kept routes hold (MAX_ROUTES_BYTES)
        self.routes_bytes = 0
        self.tables: dict[str, dict[Hashable, bytes]] = {TOPIC: {}, BROKER: {}}
        self._topic_tables = self.tables[TOPIC]
        #: counts the times the topic tables were let go: a topic list built apart (in a thread,
        #: from the names of an earlier turn) is kept only if none went meanwhile (``keep_topics``)
        self.topic_generation = 0
        #: the kept topic lists that are one cluster's (``keep_topics``), and what they hold
        #: (MAX_CLUSTER_LISTS_BYTES)
        self._cluster_lists: list[Hashable] = []
        self.cluster_lists_bytes = 0
        #: GET_SYSTEM_TOPIC_LIST_FROM_NS's body and what it shows (``system_topics``): kept until a
        #: change reaches what it shows, not dropped with the broker tables' bodies at every group's change
        self.system_topic_list: tuple[bytes, SystemTopicListShown] | None = None
        #: the times it was built (a test's count of what a change costs it)
        self.system_topic_list_builds = 0
        #: GET_BROKER_CLUSTER_INFO's pieces (cluster_info.py): a group's change re-encodes its entry only
        self.cluster_info_pieces = ClusterInfoPieces()
        #: the route bodies' pieces (route_pieces.py): a lookup after a group's change encodes
        #: only the pieces not seen before
        self.route_pieces = RoutePieces()
        #: route lookups filtered by zone, kept by group (zone_routes.py): the first after a change
        #: patches the groups it changed
        self.zone_routes = ZoneRoutes()
        #: GET_KVLIST_BY_NAMESPACE's bodies by namespace, with the namespace's table they were made
        #: of (KVConfigManager never changes one in place: a body is current while its table is)
        self.kv_lists: dict[str, tuple[Mapping[str, str], bytes]] = {}
        #: kept answer frames by the request frame up to its opaque's digits, newest first
        self.replies: dict[bytes, list[Reply]] = {}
        #: what they hold, by their weights and their keys' lengths (MAX_REPLIES_BYTES)
        self.replies_bytes = 0
        #: JSON header templates of this server's clients (the dispatcher decodes through them)
        self.headers = HeaderTemplates(SERVER_TEMPLATES_SIZE)
        #: each broker connection's answer to the registration it sent last (``keep_renewal``)
        self.renewals: dict[Channel, KeptRenewal] = {}
        #: the kept renewals' answer pieces, one bytes object per content (state/alike.py): brokers
        #: of a cluster are mostly answered alike, and 5,000 copies were 0.85 MiB
        self._pieces: Alike[bytes] = Alike(ALIKE_PIECES)
        #: the times each kept cache (KEPT_CACHES) started over past its bound: a peer filling one
        #: costs honest clients a decoded lookup each, and shows here (namesrv_kept_started_over_total)
        self.started_over: Counter[str] = Counter()
        #: a master's registration answer's header pieces by the server's version (``_master_pieces``)
        self._master: dict[int, tuple[bytes, bytes]] = {}

    # -- invalidation: the subscriptions ----------------------------------------------------------
    def holds(self) -> bool:
        """Whether anything is kept that a route change could make stale (the kept frames are
        kept with their topic's bodies)."""
        return bool(self.routes or self.tables[TOPIC] or self.tables[BROKER] or self.cluster_info_pieces.brokers
                    or self.system_topic_list or self.zone_routes.kept)

    def changed(self, change: RouteChange) -> None:
        """RouteInfoManager's changes, each once complete: drop what it reaches.  The work is the
        smaller of the change's topics and the routes kept, plus one walk of the kept routes when
        groups changed or left."""
        if change.everything:
            self._clear_answers()  # (not the kept registration answers: renew_again reads the tables)
            return
        routes = self.routes
        if change.topics:  # registrations change topics by the thousand
            if routes:
                for topic in routes.keys() & change.topics:  # a walk of the smaller of the two
                    self._drop_routes(topic)
            self._drop_topic_tables()
        if change.brokers or change.left:
            if routes:
                for topic in self._routes.topics_naming([*change.brokers, *change.left], list(routes)):
                    self._drop_routes(topic)
            if self.tables[BROKER]:
                self.tables[BROKER].clear()
            if self.zone_routes.kept:
                self.zone_routes.changed([*change.brokers, *change.left])
            kept = self.system_topic_list
            if kept is not None and self._routes.system_topic_list_changed(kept[1], [*change.brokers, *change.left]):
                self.system_topic_list = None
            if self.cluster_info_pieces.brokers:
                self.cluster_info_pieces.forget([*change.brokers, *change.left])
        if change.left:  # their topics may have left with them
            self._drop_topic_tables()

    def kv_changed(self, namespace: str, key: str) -> None:
        """KVConfigManager's changes: an ORDER_TOPIC_CONFIG key is shown in its topic's routes."""
        self.kv_lists.pop(namespace, None)
        if namespace == NAMESPACE_ORDER_TOPIC_CONFIG:
            self._drop_topic(key)
            self.renewals.clear()

    def _drop_topic(self, topic: str) -> None:
        """The topic's routes, and the topic list (it may have come or gone)."""
        self._drop_routes(topic)
        self._drop_topic_tables()

    def _drop_topic_tables(self) -> None:
        """Let the topic lists go, and count it (``keep_topics`` keeps none built before)."""
        self.topic_generation += 1
        if self._topic_tables:
            self._topic_tables.clear()
            self._cluster_lists.clear()
            self.cluster_lists_bytes = 0

    def _drop_routes(self, topic: str) -> None:
        answers = self.routes.pop(topic, None)
        if answers is not None:
            answers.stale = True  # the frames kept from them see it (replies_from_memory)
            self.routes_bytes -= answers.size
            answers.bodies.clear()  # a stale frame holds its own answer end (counted), not the bodies too

    def config_changed(self) -> None:
        """NamesrvConfig's updates: everything may answer differently (a switch changed, or a limit
        a registration was checked under), so every kept answer goes: routes, tables, frames, KV
        lists, the registration answers and the pieces they shared.  The header templates stay:
        they are the requests' bytes, which no setting changes; nor do the pieces the cluster info
        and the routes are joined of (each group's and cluster's entry, each BrokerData and
        QueueData: what they show is the tables'), so they stay too.  Let go, any peer's update
        (without ACL) made the next cluster info encode every group again: at 20,000 groups, an
        update and an ask in a loop held the reactor 2 M Python calls a turn."""
        self._clear_answers(keep_pieces=True)
        self.renewals.clear()
        self._pieces.clear()
        self.kv_lists.clear()

    def _clear_answers(self, keep_pieces: bool = False) -> None:
        """Every kept route and table (the tables were replaced), and the cluster info's pieces
        unless ``keep_pieces`` (a config update: the tables stand)."""
        if self.routes or self.replies:
            self._drop_every_route()
        self._drop_topic_tables()
        self.tables[BROKER].clear()
        self.system_topic_list = None
        if self.zone_routes.kept:  # (a config update too: supportActingMaster shapes what each group shows)
            self.zone_routes.clear()
        if self.cluster_info_pieces.brokers and not keep_pieces:
            self.cluster_info_pieces.clear()

    def _drop_every_route(self) -> None:
        """Every kept route body, and the answer frames kept from them (each holds its topic's rest)."""
        for answers in self.routes.values():
            answers.stale = True
        self.routes.clear()
        self.routes_bytes = 0
        self.replies.clear()
        self.replies_bytes = 0

    def _replies_over(self) -> None:
        """The kept frames start over (MAX_REPLIES_BYTES or MAX_REPLIES reached), and with them the
        answer ends the kept topics made for them: counted with the frames, no frame holds them now."""
        self.replies.clear()
        self.replies_bytes = 0
        for answers in self.routes.values():
            if answers.rests:
                answers.rests.clear()

    # -- route bodies ---------------------------------------------------------------------------
    def route(self, topic: str | None, variant: Hashable) -> bytes | None:
        answers = self.routes.get(topic) if topic is not None else None
        return answers.bodies.get(variant) if answers is not None else None

    def route_body(self, route: RouteData, order_conf: str | None, v5: bool, standard: bool) -> bytes:
        """A route's body, joined of kept pieces (route_pieces.py); encoded whole by a cache that
        keeps nothing (the reference the differential tests compare the pieces against)."""
        mapping = route.topicQueueMappingByBroker
        if not self.keep:
            return fastjson.dumps_bytes(topic_route_bean(route.queueDatas, route.brokerDatas, route.filterServerTable,
                                                         order_conf, mapping, v5), standard)
        pieces = self.route_pieces
        started_over = pieces.started_over
        body = pieces.body(route.queueDatas, route.brokerDatas, route.filterServerTable, order_conf, mapping, v5,
                           standard, len(self._routes.brokerAddrTable))
        if pieces.started_over != started_over:
            self.started_over["route_pieces"] += 1
        return body

    def zone_route_body(self, topic: str, zone: str, order_conf: str | None, v5: bool) -> bytes | None:
        """A route filtered by ``zone`` (None: no route), patched from what is kept by group
        (zone_routes.py); only when ``keeps_zone_routes``."""
        zones = self.zone_routes
        started_over = zones.started_over
        body = zones.body(self._routes, self.route_pieces, topic, zone, order_conf, v5)
        if zones.started_over != started_over:
            self.started_over["zone_routes"] += 1
        return body

    def keeps_zone_routes(self) -> bool:
        """Whether a lookup filtered by zone is joined of what ``zone_routes`` keeps (not by a cache
        that keeps nothing, the reference; nor while brokers have filter servers)."""
        return self.keep and ZoneRoutes.keeps(self._routes)

    # -- whole tables ---------------------------------------------------------------------------
    def table(self, key: Hashable, shows: str, build: Callable[[], bytes]) -> bytes:
        """The body under ``key`` that ``shows`` TOPIC or BROKER tables, built when missing."""
        kept = self.tables[shows]
        body = kept.get(key)
        if body is None:
            body = build()
            if self.keep:
                kept[key] = body
        return body

    def system_topics(self, build: Callable[[], tuple[bytes, SystemTopicListShown]]) -> bytes:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS's body, kept with what it shows (``build``'s second), until a
        change reaches that (``changed``: RouteInfoManager.system_topic_list_changed): every cluster
        and group name, and one group's address.  Kept as a broker table, it went at every change of any
        group (a member's registration, a zone's), and the next ask hashed and ordered every name again."""
        kept = self.system_topic_list
        if kept is not None:
            return kept[0]
        body, shown = build()
        self.system_topic_list_builds += 1
        if self.keep:
            self.system_topic_list = (body, shown)
        return body

    def cluster_info(self, key: Hashable, build: Callable[[], bytes], pieces: Callable[[ClusterInfoPieces], bytes]
                     ) -> bytes:
        """GET_BROKER_CLUSTER_INFO's body, kept under ``key`` like a table that shows brokers: joined
        of the kept pieces (``pieces``, cluster_info.py) when missing, so a change of one group
        re-encodes that group's entry, not every group's; ``build`` (the general path) when nothing
        is kept (``keep=False``, the reference)."""
        if not self.keep:
            return build()
        return self.table(key, BROKER, lambda: pieces(self.cluster_info_pieces))

    def kept_topics(self, key: Hashable) -> bytes | None:
        """A topic list kept under ``key``."""
        return self._topic_tables.get(key)

    def keep_topics(self, key: Hashable, body: bytes, generation: int, one_cluster: bool = False) -> None:
        """Keep a topic list built from the names as they were at ``generation``, if they still are.
        ``one_cluster``: a cluster's (GET_TOPICS_BY_CLUSTER), one of as many as peers make clusters:
        those are kept within MAX_CLUSTER_LISTS_BYTES, starting over past it (a list bigger than
        that alone is answered, never kept); the others are a few keys, each list at most every
        topic's name."""
        if not self.keep or generation != self.topic_generation:
            return
        if one_cluster and key not in self._topic_tables:
            size = len(body) + CLUSTER_LIST_OVERHEAD
            if size > MAX_CLUSTER_LISTS_BYTES:
                return
            if self.cluster_lists_bytes + size > MAX_CLUSTER_LISTS_BYTES:
                self.started_over["cluster_lists"] += 1
                for kept in self._cluster_lists:
                    del self._topic_tables[kept]
                self._cluster_lists.clear()
                self.cluster_lists_bytes = 0
            self._cluster_lists.append(key)
            self.cluster_lists_bytes += size
        self._topic_tables[key] = body

    def kv_list(self, namespace: str, table: Mapping[str, str]) -> bytes | None:
        """A namespace's KV list kept from ``table`` (the namespace's table now), if any."""
        kept = self.kv_lists.get(namespace)
        return kept[1] if kept is not None and kept[0] is table else None

    def keep_kv_list(self, namespace: str, table: Mapping[str, str], body: bytes) -> None:
        if self.keep:
            self.kv_lists[namespace] = (table, body)

    # -- route answers: kept by the dispatcher, served from memory -------------------------------
    def keep_route(self, frame: bytes | None, request: RemotingCommand, response: RemotingCommand, encoded: bytes,
                   topic: str, variant: Hashable) -> None:
        """Keep a found route (``response``, encoded as ``encoded``, its handler's ``topic`` and
        ``variant``): its body for the next lookup of any client, and, for a plain JSON lookup, its
        whole frame around the opaque for the next lookup of the same client (not when ``frame``
        is None: its bytes alone do not decide that it is let in, the ACL checks the peer)."""
        body = response.body
        if not self.keep or not isinstance(body, bytes):
            return
        if frame is not None and len(frame) > KEPT_HEADER_MAX + 4:  # (a lookup's frame: its header's length, a header)
            frame = None  # its body is kept, not its frame: any peer chooses the frame's bytes
        answers = self.routes.get(topic)
        if answers is None or variant not in answers.bodies:
            adding = len(body) + PIECE_OVERHEAD + (TOPIC_OVERHEAD if answers is None else 0)
            if adding > MAX_ROUTES_BYTES:
                return  # answered, never kept
            if self.routes_bytes + adding > MAX_ROUTES_BYTES:
                self.started_over["routes"] += 1
                self._drop_every_route()  # start over (each lookup then builds its topic's body once)
                answers = None
            if answers is None:
                answers = self.routes[topic] = TopicAnswers()
                self.routes_bytes += TOPIC_OVERHEAD
            answers.bodies[variant] = body
            answers.size += len(body) + PIECE_OVERHEAD
            self.routes_bytes += len(body) + PIECE_OVERHEAD
        body = answers.bodies[variant]
        if (frame is not None and body is response.body and request.serialize_type == JSON_SERIALIZE
                and response.serialize_type == JSON_SERIALIZE and not request.body and not request.is_oneway
                and frame.count(OPAQUE_KEY) == 1):
            self._keep_reply(frame, request.opaque, encoded, answers, variant, body)

    def _keep_reply(self, frame: bytes, opaque: int, encoded: bytes, answers: TopicAnswers, variant: Hashable,
                    body: bytes) -> None:
        digits = str(opaque).encode()
        at = frame.find(OPAQUE_KEY) + _OPAQUE_AT
        end = at + len(digits)
        header = encoded[8:len(encoded) - len(body)]
        split = header.find(b'"opaque":' + digits + b",")
        if opaque < 0 or frame[at:end] != digits or split < 0:
            return  # not as replies_from_memory reads it: always decoded
        head, tail = header[:split + _OPAQUE_AT], header[split + _OPAQUE_AT + len(digits):]
        made = len(tail) + len(body) + REST_OVERHEAD  # a new answer end's weight
        if (variant, tail) not in answers.rests and _rests_like(answers, variant) >= MAX_RESTS_PER_TOPIC:
            return  # (the topic's bodies stay kept: it is answered from them)
        header_length = len(head) + len(digits) + len(tail)
        prefix = _PREFIX.pack(4 + header_length + len(body), (JSON_SERIALIZE << 24) | header_length) + head
        after = frame[end:]
        weight = len(after) + len(prefix) + len(tail) + REPLY_OVERHEAD  # (Reply.weight)
        adding = weight + at + HEAD_OVERHEAD + made  # (at most: its request's start, its end may be kept already)
        if adding > MAX_REPLIES_BYTES:
            return  # more than the whole budget: answered from the bodies, never kept
        if len(self.replies) >= MAX_REPLIES or self.replies_bytes + adding > MAX_REPLIES_BYTES:
            self.started_over["replies"] += 1
            self._replies_over()
        rest = answers.rests.get((variant, tail))
        if rest is None:
            rest = answers.rests[variant, tail] = tail + body
            self.replies_bytes += made  # counted while any frame may hold it: until the frames start over
        reply = Reply(len(digits) + len(after), after, len(digits), answers, prefix, rest, len(tail))
        kept = self.replies.get(frame[:at])
        if kept is None:
            kept = self.replies[frame[:at]] = []
            self.replies_bytes += at + HEAD_OVERHEAD
        others = [k for k in kept if k.after != after]
        self.replies_bytes -= sum(k.weight() for k in kept) - sum(k.weight() for k in others[:MAX_REPLIES_PER_HEAD - 1])
        kept[:] = others[:MAX_REPLIES_PER_HEAD - 1]
        kept.insert(0, reply)
        self.replies_bytes += reply.weight()

    def _forget_reply(self, kept: list[Reply], reply: Reply) -> None:
        """A kept frame whose topic was dropped since, met when served."""
        kept.remove(reply)
        self.replies_bytes -= reply.weight()

    # -- a broker's registration sent again -------------------------------------------------------
    def keep_renewal(self, frame: bytes, channel: Channel, opaque: int, encoded: bytes, renewal: Renewable,
                     key: RenewalKey | None | Unread = UNREAD) -> None:
        """Keep ``encoded``, the answer to the plain JSON registration ``frame`` (its opaque
        ``opaque``) on ``channel``, to answer the same registration again there
        (``renewal_from_memory``); the request is kept as a SHA-1 (``renewal_key_steps``), so a
        broker's table costs 20 bytes, not its size (``key``: worked out already, in steps, for a
        big one).  The channel's answer kept before goes (a frame not read so, or an answer past
        MAX_RENEWAL_ANSWER: nothing is kept)."""
        if not self._renewal_room(channel, encoded):
            return
        if isinstance(key, Unread):
            key = _renewal_key(frame)
        digits = str(opaque).encode()
        header_length = _LENGTH.unpack_from(encoded, 4)[0] & 0xFFFFFF
        split = encoded.find(OPAQUE_KEY + digits, 8, 8 + header_length) + _OPAQUE_AT
        if (key is None or frame[key.at:key.at + key.digits] != digits or split < _OPAQUE_AT
                or encoded[split + len(digits):split + len(digits) + 1] not in (b",", b"}")):
            return  # not as renewal_from_memory reads it: decoded every time
        self._keep_renewal_pieces(channel, frame, key, renewal, encoded[8:split], encoded[split + len(digits):],
                                  header_length - len(digits))

    def keep_first_renewal(self, frame: bytes, channel: Channel, opaque: int, version: int,
                           renewal: Renewable, whole: WholeSplit | None = None) -> bytes:
        """A master's answer to the plain JSON registration ``frame`` (processor.register_fused),
        spliced from its pieces: SUCCESS, extFields ``{}``, no body, the server's ``version``, as
        ``respond`` encodes it in Java's layout; kept for its renewal as ``keep_renewal`` keeps the
        encoded one (the same pieces, the same checks), without looking the pieces up in it.
        ``whole``: its body's split (``split_small``), which its key goes on from."""
        head, rest = self._master_pieces(version)
        digits = b"%d" % opaque
        header_length = len(head) + len(digits) + len(rest)
        encoded = b"".join((_PREFIX.pack(4 + header_length, header_length), head, digits, rest))
        if not self._renewal_room(channel, encoded):
            return encoded
        key = _renewal_key(frame) if whole is None else renewal_key_after_split(frame, whole)
        if key is None or frame[key.at:key.at + key.digits] != digits:
            return encoded  # not as renewal_from_memory reads it: decoded every time
        self._keep_renewal_pieces(channel, frame, key, renewal, head, rest, header_length - len(digits), shared=True)
        return encoded

    def _renewal_room(self, channel: Channel, encoded: bytes) -> bool:
        """Let ``channel``'s kept registration answer go, and say whether ``encoded`` may be kept in
        its place: anything is kept, it is within MAX_RENEWAL_ANSWER, and the channel had one or
        fewer than MAX_REPLIES connections keep one (the gate of both ways in: ``keep_renewal``,
        ``keep_first_renewal``)."""
        kept = self.renewals.pop(channel, None)
        return (self.keep and len(encoded) <= MAX_RENEWAL_ANSWER
                and (kept is not None or len(self.renewals) < MAX_REPLIES))

    def _keep_renewal_pieces(self, channel: Channel, frame: bytes, key: RenewalKey, renewal: Renewable,
                             head: bytes, rest: bytes, header_length: int, shared: bool = False) -> None:
        """Keep the answer ``head`` + opaque digits + ``rest`` (``header_length`` its header's length
        but the digits) for ``channel``'s registration ``frame`` read as ``key``: its pieces and its
        key's shape shared (``_pieces``; ``shared``: the pieces are one object each already, a
        master's, ``_master_pieces``), and its bodyCrc32 kept when the same bytes send the same one
        and the frame is big enough for a changed table to be worth telling before hashing
        (KeptRenewal.crc)."""
        crc = key.crc if key.same_crc and key.crc and len(frame) >= STEP_BYTES else None
        if not shared:
            head, rest = self._pieces(head), self._pieces(rest)
        self.renewals[channel] = KeptRenewal(key.digest, renewal, head, rest, header_length, crc,
                                             self._pieces(key.shape))

    def _master_pieces(self, version: int) -> tuple[bytes, bytes]:
        """A master's registration answer's header around its opaque's digits (``keep_first_renewal``)."""
        pieces = self._master.get(version)
        if pieces is None:
            pieces = self._master[version] = (b'{"code":0,"extFields":{},"flag":1,"language":"JAVA",' + OPAQUE_KEY,
                                              b',"serializeTypeCurrentRPC":"JSON","version":%d}' % version)
        return pieces

    def renewal_from_memory(self, frame: bytes, channel: Channel) -> bytes | None:
        """The answer to ``frame`` on ``channel`` when it is the registration whose answer is kept
        for that channel (``keep_renewal``) but for its opaque, its bodyCrc32 and a 5.x body's
        mappingDataVersion (``renewal_key_steps``), its CRC as it says (else the usual way answers the
        mismatch), and RouteInfoManager.renew_again renews the broker with the answer showing what
        it showed: the kept answer with the request's opaque spliced in.  None (the frame goes the
        usual way) otherwise; a kept answer that no longer renews is dropped."""
        return run_steps(self.renewal_in_steps(frame, channel))

    def renewal_in_steps(self, frame: bytes, channel: Channel) -> Steps[bytes | None]:
        """``renewal_from_memory`` a STEP_BYTES of hashing a step (a big table sent again, checked
        across reactor turns: dispatch.py); the broker is renewed in the last step, when the
        channel still keeps the answer the first step found."""
        kept = self.renewals.get(channel)
        if kept is None:
            return None
        key = yield from renewal_key_steps(frame, kept.crc, kept.shape)
        if key is None or key.digest != kept.digest:
            return None
        if key.crc and (yield from crc32_masked_steps(memoryview(frame)[key.body:], STEP_BYTES)) != key.crc:
            return None
        if self.renewals.get(channel) is not kept:
            return None  # (forgotten or kept anew between the steps)
        if not self._routes.renew_again(kept.renewal, channel):
            del self.renewals[channel]
            return None
        if key.shape != kept.shape:  # (its opaque a digit longer: the next ones are read where it was)
            self.renewals[channel] = msgspec.structs.replace(kept, shape=self._pieces(key.shape))
        digits = frame[key.at:key.at + key.digits]
        header_length = kept.header_length + len(digits)
        return b"".join((_PREFIX.pack(4 + len(kept.head) + len(digits) + len(kept.rest),
                                      (JSON_SERIALIZE << 24) | header_length), kept.head, digits, kept.rest))

    def forget_channel(self, channel: Channel) -> None:
        """The connection closed: its kept registration answer goes with it."""
        self.renewals.pop(channel, None)

    def replies_from_memory(self, frames: Sequence[bytes], start: int, out: list[bytes], room: int = NO_LIMIT) -> int:
        """Append the answers to ``frames[start:]`` that are repeated plain JSON route lookups to
        ``out``, in order, up to the first that is not, or until they reach ``room`` bytes (at
        least one): the index of the first frame not answered (``len(frames)``: all were).
        Each is the kept answer frame with the request's own opaque spliced in, without decoding.

        A kept frame is found by the request up to its opaque's digits (header-length word
        included) and checked against the rest after them, without copying either; the digits
        are checked to be what Java would read as that same number (ASCII, no leading zero, an
        int32)."""
        replies = self.replies
        head, size, after, at = b"", -1, b"", 0  # the last frame's (none yet): pipelined lookups repeat it
        count = len(frames)
        block_until = count - BLOCK_FROM  # a frame up to this index may start a block
        for index in range(start, count):
            frame = frames[index]
            if not (len(frame) - at == size and frame.startswith(head) and frame.endswith(after)):
                at = frame.find(OPAQUE_KEY, 8) + _OPAQUE_AT
                if at < _OPAQUE_AT:
                    return index
                kept = replies.get(frame[:at])
                if kept is None:
                    return index
                reply = self._match(kept, frame, len(frame) - at)
                if reply is None:
                    return index
                size, after, length, answers = reply.size, reply.after, reply.digits, reply.answers
                prefix, rest = reply.prefix, reply.rest
                if answers.stale:  # its topic was dropped since
                    self._forget_reply(kept, reply)
                    return index
                head = frame[:at]
                reply_size = len(prefix) + length + len(rest)
                if index <= block_until:
                    fit = min(count - index, max(1, room // reply_size))
                    if fit >= BLOCK_FROM and _splice_block(frames, index, fit, at, length, prefix, rest, out):
                        return index + fit
            digits = frame[at:at + length]
            if not _valid_digits(digits):
                return index
            out += (prefix, digits, rest)
            room -= reply_size
            if room <= 0:
                return index + 1
        return len(frames)

    @staticmethod
    def _match(kept: list[Reply], frame: bytes, size: int, end: int | None = None) -> Reply | None:
        """The reply kept for the request ``frame`` (or the one ending at ``end`` in a read) among
        those with the same start (newest first)."""
        for reply in kept:  # by position: the first read of every lookup passes here
            if size == reply.size and frame.endswith(reply.after, 0, end):
                return reply
        return None

    def replies_from_read(self, data: bytes, out: list[bytes], room: int = NO_LIMIT) -> tuple[int, int]:
        """Answer the frames at the start of a read, as it came (length prefixes included, not
        cut into frames), when they are one client's repeats of one kept plain JSON lookup: the
        first frame's kept answer for each, with each frame's own opaque spliced in, as many as
        fit in ``room`` bytes (at least one).  (bytes answered, lookups answered); (0, 0), with
        nothing appended, when the read does not start so, and the frames go the usual way
        (``replies_from_memory`` after the cut).

        The same rules as ``replies_from_memory``: the first frame is found by its bytes up to
        its opaque's digits and checked against the rest; the frames after it answered with it
        are those bytes but for the digits (``_splice_records``), all of one length, as pipelined
        lookups of one client are; the first frame that is not ends the block, and it and what
        follows are cut as usual."""
        if len(data) < 8:
            return 0, 0
        record = _LENGTH.unpack_from(data)[0] + 4
        if not 8 <= record <= len(data):
            return 0, 0
        at = data.find(OPAQUE_KEY, 8, record) + _OPAQUE_AT
        if at < _OPAQUE_AT:
            return 0, 0
        kept = self.replies.get(data[4:at])
        if kept is None:
            return 0, 0
        reply = self._match(kept, data, record - at, record)
        if reply is None:
            return 0, 0
        if reply.answers.stale:  # its topic was dropped since
            self._forget_reply(kept, reply)
            return 0, 0
        length, prefix, rest = reply.digits, reply.prefix, reply.rest
        n = min(len(data) // record, max(1, room // (len(prefix) + length + len(rest))))
        if n == 1:  # one lookup in flight (the latency path): no block to check
            digits = data[at:at + length]
            if not _valid_digits(digits):
                return 0, 0
            out += (prefix, digits, rest)  # joined with the read's other answers (server.py: one send)
            return record, 1
        if not _splice_records(data, record, n, at, length, prefix, rest, out):
            n = _first_other(data, record, n, at, length)  # the frames before the first that is not
            if not n or not _splice_records(data, record, n, at, length, prefix, rest, out):
                return 0, 0
        return n * record, n


def _zoned(variant: Hashable) -> bool:
    """Whether a route variant is a lookup filtered by zone's (processor.route_variant: three long)."""
    return isinstance(variant, tuple) and len(variant) == 3


def _rests_like(answers: TopicAnswers, variant: Hashable) -> int:
    """The topic's answer ends of variants of the kind of ``variant``, filtered by zone or not: each
    kind has MAX_RESTS_PER_TOPIC of them, so that zones a peer names (any client's choice) cannot
    take the plain lookups' room (at most 2 * MAX_RESTS_PER_TOPIC, a short walk)."""
    zoned = _zoned(variant)
    return sum(1 for kept, _ in answers.rests if _zoned(kept) == zoned)


def _splice_block(frames: Sequence[bytes], index: int, n: int, at: int, length: int, prefix: bytes, rest: bytes,
                  out: list[bytes]) -> bool:
    """Answer the ``n`` frames from ``frames[index]`` at once when each is ``frames[index]`` but
    for its opaque's ``length`` digits at ``at`` (a client's pipelined lookups of one topic);
    ``_splice_records`` on them joined."""
    block = b"".join(frames[index:index + n])
    record = len(frames[index])
    return len(block) == record * n and _splice_records(block, record, n, at, length, prefix, rest, out)


def _renewal_key(frame: bytes, crc_kept: int | None = None, shape: bytes = b"") -> RenewalKey | None:
    """``renewal_key_steps`` at once."""
    return run_steps(renewal_key_steps(frame, crc_kept, shape))


def renewal_key_steps(frame: bytes, crc_kept: int | None = None, shape: bytes = b"") -> Steps[RenewalKey | None]:
    """A plain JSON registration frame (its length prefix stripped) read for what tells it from
    its broker's last one: the SHA-1 of its bytes but three values, each found by its key, that
    differ between two registrations the routes apply alike: the opaque (every request's own),
    bodyCrc32 (checked against the body instead) and a 5.x body's mappingDataVersion (a new
    timestamp in every one, read by nobody: bodies/register.py's mapping_version_span), with the
    lengths of what it hashes.  None when it cannot be read so (not JSON, a key twice, digits Java
    would read otherwise): it is then decoded; None too, before any hashing, when its body has no
    mappingDataVersion and its bodyCrc32 is not ``crc_kept`` (a big registration's kept one:
    KeptRenewal.crc), so a changed table of megabytes is not hashed in vain.  A step hashes
    STEP_BYTES (about 0.25 ms of SHA-1).

    Two forms, never one another's input (the split form begins with ``whole``, the other with the
    header's length, a zero byte).  A frame of at most STEP_BYTES whose body has a dataVersion where
    Java writes it (``version_spans``) is hashed as its registration's split hashes the body
    (split_data_version's ``whole`` form: the body but its versions), then the dataVersion's text,
    the header but the two values' digits, and the lengths last (``_split_tail``): the first
    registration's key then goes on from its split's SHA-1 (``renewal_key_after_split``), the body
    hashed once.  Any other is hashed as it lies but the three values, the lengths first.

    ``shape``: where the broker's last one was read (``RenewalKey.shape``).  A frame of its length
    (a heartbeat's opaque has as many digits as the last one's, but once in a power of ten) is read
    there, not looked through: its opaque's, bodyCrc32's and stamp's spans where they were, each
    checked as the reading through checks it, and its dataVersion's there.  Its digest is the last
    one's only when every byte but theirs is the same, and then the reading through finds each
    there again: neither key looked for in the header can take in a byte of a span of digits
    (``"opaque":`` has no digit; ``"bodyCrc32":"``'s are preceded by what precedes no span), the
    dataVersion is hashed with the bytes around it, and the body's stamp, the one span whose
    reading looks into it, is read again.  A frame of that length whose spans moved gets another
    digest: the usual way answers it."""
    if shape and len(frame) == _SHAPE.unpack_from(shape)[0]:
        size, end, at, stop, crc_at, crc_stop, mapping_at, mapping_stop, dv_at, dv_stop = _SHAPE.unpack(shape)
        if 4 + _LENGTH.unpack_from(frame)[0] != end or not _valid_digits(frame[at:stop]):
            return None
        crc = 0
        if crc_stop > crc_at:
            sent = frame[crc_at:crc_stop]
            if not _valid_digits(sent):
                return None
            crc = int(sent)
        if mapping_stop > mapping_at and (mapping_version_span(memoryview(frame)[end:])
                                          != (mapping_at - end, mapping_stop - end)):
            return None
    else:
        header = _header_spans(frame)
        if header is None:
            return None
        size, end, at, stop, crc, crc_at, crc_stop = header
        mapping_at = mapping_stop = size  # (none: an empty span at the frame's end)
        dv_at = dv_stop = -1  # (not the split form)
        spans = version_spans(memoryview(frame)[end:])
        if spans is not None:
            opening, closing, rest = spans
            if rest > closing:
                mapping_at, mapping_stop = end + closing, end + rest
            if size <= STEP_BYTES:
                dv_at, dv_stop = end + opening, end + closing
        shape = _SHAPE.pack(size, end, at, stop, crc_at, crc_stop, mapping_at, mapping_stop, dv_at, dv_stop)
    if mapping_stop == mapping_at and crc_kept is not None and crc != crc_kept:
        return None
    view = memoryview(frame)
    if dv_at >= 0:  # the split form: the body as its split hashes it (WHOLE_TAG), then the rest, in one update
        rest = mapping_stop if mapping_stop > mapping_at else dv_stop
        digest = hashlib.sha1(b"".join((WHOLE_TAG % (dv_at - end), view[end:dv_at], view[rest:size],
                                        *_split_tail(view, end, at, stop, crc_at, crc_stop, dv_at, dv_stop, rest))))
        return RenewalKey(at, stop - at, crc, end, digest.digest(), rest == dv_stop, shape)
    (first, first_end), (second, second_end) = (((at, stop), (crc_at, crc_stop)) if at < crc_at
                                                 else ((crc_at, crc_stop), (at, stop)))
    stretches = (view[4:first], view[first_end:second], view[second_end:mapping_at], view[mapping_stop:size])
    digest = hashlib.sha1()
    digest.update(_LAYOUT.pack(end - 4 - (stop - at) - (crc_stop - crc_at), *map(len, stretches)))
    if size <= STEP_BYTES:  # a heartbeat's: its stretches joined, one update, no step
        digest.update(b"".join(stretches))
    else:
        for stretch in stretches:
            if len(stretch) <= STEP_BYTES:
                digest.update(stretch)
            else:
                yield from _hashed_steps(digest, stretch)
    return RenewalKey(at, stop - at, crc, end, digest.digest(), mapping_stop == mapping_at, shape)


def _header_spans(frame: bytes) -> tuple[int, int, int, int, int, int, int] | None:
    """A registration frame's header looked through for its two values: the frame's size, where its
    header ends, its opaque's digits (start, end), its bodyCrc32 as sent (0: none) and its digits'
    span (none: an empty span at the header's end); None when not read so (``renewal_key_steps``)."""
    size = len(frame)
    end = 4 + _LENGTH.unpack_from(frame)[0]  # (a JSON header's type byte is 0)
    if frame[0] != JSON_SERIALIZE or end > size:
        return None
    at = frame.find(OPAQUE_KEY, 4, end) + _OPAQUE_AT
    digits = _DIGITS.match(frame, at, end) if at >= _OPAQUE_AT else None
    if digits is None or frame.find(OPAQUE_KEY, at, end) >= 0 or not _valid_digits(digits.group()):
        return None
    stop, crc, crc_at, crc_stop = digits.end(), 0, end, end
    at_crc = frame.find(_CRC_KEY, 4, end) + len(_CRC_KEY)
    if at_crc >= len(_CRC_KEY):
        close = frame.find(b'"', at_crc, end)
        if close < 0 or frame.find(_CRC_KEY, close, end) >= 0 or not _valid_digits(frame[at_crc:close]):
            return None
        crc, crc_at, crc_stop = int(frame[at_crc:close]), at_crc, close
    return size, end, at, stop, crc, crc_at, crc_stop


def _split_tail(view: memoryview, end: int, at: int, stop: int, crc_at: int, crc_stop: int, dv_at: int,
                dv_stop: int, rest: int) -> tuple[memoryview | bytes, ...]:
    """What a key of the split form hashes after the body but its versions (``renewal_key_steps``):
    the dataVersion's text, the header but its opaque's and bodyCrc32's digits, and last the
    lengths of all it joined (read from the end, they tell every piece apart); ``rest``: where the
    body goes on after its versions."""
    (first, first_end), (second, second_end) = (((at, stop), (crc_at, crc_stop)) if at < crc_at
                                                 else ((crc_at, crc_stop), (at, stop)))
    return (view[dv_at:dv_stop], view[4:first], view[first_end:second], view[second_end:end],
            _SPLIT_LAYOUT.pack(end - 4 - (stop - at) - (crc_stop - crc_at), len(view) - rest, dv_stop - dv_at,
                               first - 4, second - first_end, end - second_end))


def renewal_key_after_split(frame: bytes, whole: WholeSplit) -> RenewalKey | None:
    """``renewal_key_steps(frame)`` of a registration whose body (the frame after its header) was
    split as ``whole`` (bodies/register.py's ``split_small``: processor.register_fused): the same
    key, going on from a copy of the split's SHA-1, so the body is hashed once for both, where the
    split found its versions where the key reads them (``version_spans``: the body's first
    kilobyte) and the frame takes the split form; else read through."""
    header = _header_spans(frame)
    if header is None:
        return None
    size, end, at, stop, crc, crc_at, crc_stop = header
    if size > STEP_BYTES or whole.rest > VERSIONS_WITHIN:
        return _renewal_key(frame)
    dv_at, dv_stop, rest = end + whole.opening, end + whole.end, end + whole.rest
    mapping_at, mapping_stop = (dv_stop, rest) if rest > dv_stop else (size, size)
    shape = _SHAPE.pack(size, end, at, stop, crc_at, crc_stop, mapping_at, mapping_stop, dv_at, dv_stop)
    digest = whole.hashed.copy()
    digest.update(b"".join(_split_tail(memoryview(frame), end, at, stop, crc_at, crc_stop, dv_at, dv_stop, rest)))
    return RenewalKey(at, stop - at, crc, end, digest.digest(), rest == dv_stop, shape)


def _hashed_steps(digest: Any, data: memoryview) -> Steps[None]:
    """``digest.update(data)``, STEP_BYTES a step."""
    for start in range(0, len(data), STEP_BYTES):
        digest.update(data[start:start + STEP_BYTES])
        yield


def _valid_digits(digits: bytes) -> bool:
    """An opaque's digits as Java reads them: ASCII digits, no leading zero, an int32."""
    length = len(digits)
    return (digits.isdigit() and (digits[0] != 48 or length == 1)
            and (length < 10 or (length == 10 and digits <= _MAX_INT32)))


def _splice_records(data: bytes, record: int, n: int, at: int, length: int, prefix: bytes, rest: bytes,
                    out: list[bytes]) -> bool:
    """Answer the ``n`` records of ``record`` bytes at the start of ``data`` at once when each is
    the first but for its opaque's ``length`` digits at ``at``: the checks and the splicing are a
    few C-level operations on the whole block instead of Python steps per frame.  Repeats with
    one opaque (as load tools send them) are one count of the first record; others go by column
    of digits.  The same rule as per frame: ASCII digits, no leading zero, and an int32 (ten
    digits go frame by frame).  False, with nothing appended, when any record is not so."""
    first = data[:record]
    whole = record * n
    if data.count(first, 0, whole) == n:  # n copies of it in n records' bytes: it, n times
        digits = first[at:at + length]
        if not _valid_digits(digits):
            return False
        out.append(b"".join((prefix, digits, rest)) * n)
        return True
    if length >= 10:
        return False
    block = data[:whole] if whole < len(data) else data
    columns = [block[at + k::record] for k in range(length)]
    if not all(column.isdigit() for column in columns) or (length > 1 and b"0" in columns[0]):
        return False
    blanked, zeros = bytearray(block), b"0" * n
    for k in range(length):
        blanked[at + k::record] = zeros
    if blanked != blanked[:record] * n:  # every record is the first but for its digits
        return False
    answer = b"".join((prefix, b"0" * length, rest))
    answers, step = bytearray(answer * n), len(answer)
    for k, column in enumerate(columns):
        answers[len(prefix) + k::step] = column
    out.append(answers)  # type: ignore[arg-type]  # joined with the others: bytes-like is enough
    return True


def _first_other(data: bytes, record: int, n: int, at: int, length: int) -> int:
    """How many of the ``n`` records at the start of ``data`` come before the first that is not
    the first but for valid digits at ``at`` (at least 1 when the first's digits are valid)."""
    first = data[:record]
    head, tail = first[:at], first[at + length:]
    for index in range(n):
        start = index * record
        if not (data.startswith(head, start) and data.startswith(tail, start + at + length)
                and _valid_digits(data[start + at:start + at + length])):
            return index
    return n
