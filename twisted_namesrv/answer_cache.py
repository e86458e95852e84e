"""Answers kept in memory, dropped exactly when the routes say what changed.

Clients repeat the same route lookup every 30 s with a new opaque (load tools far more often),
and admin tools ask for whole tables; encoding is the expensive part and the tables change far
less often.  Three levels, one owner:

- route bodies, per topic and variant (standard JSON or not, orderTopicConf);
- whole-table bodies (cluster info, the topic list), each tied to what it shows: brokers or topics;
- whole answer frames to plain JSON route lookups, kept around the opaque and served without
  decoding while the body they carry is still the topic's (checked by identity).

RouteInfoManager publishes each change through its ``on_change`` hook: a topic (drop its
bodies and the topic list), a broker group (drop every route naming it and the cluster info),
everything.  The cache subscribes only while it holds something, so a first registration of
many topics on a fresh server pays no call per topic.  Handlers drop a topic whose
orderTopicConf changed, and everything when the configuration changed, since switches shape
answers.  ``keep=False`` keeps nothing: the reference the differential tests compare against.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from .remoting import RemotingCommand, SerializeType
from .remoting.frame import encode_frame, split_frame
from .remoting.header import OPAQUE_KEY, opaque_split
from .state.routes import BROKER, TOPIC, RouteInfoManager

#: answer frames kept before starting over (one per client variant of a lookup)
MAX_REPLIES = 65536

#: a kept answer frame: (topic, variant, body, header before the opaque, header after it)
Reply = tuple[str, Hashable, bytes, bytes, bytes]


class AnswerCache:
    def __init__(self, routes: RouteInfoManager, keep: bool = True) -> None:
        self._state = routes
        self.keep = keep
        self.routes: dict[str, dict[Hashable, bytes]] = {}
        self.tables: dict[str, dict[Hashable, bytes]] = {TOPIC: {}, BROKER: {}}
        self._topic_tables = self.tables[TOPIC]
        self.replies: dict[bytes, Reply] = {}

    def _subscribe(self) -> None:
        self._state.on_change = self.changed

    # -- invalidation -------------------------------------------------------------------------
    def changed(self, kind: str, name: str | None) -> None:
        """RouteInfoManager's on_change: drop what ``kind``/``name`` reaches."""
        if kind == TOPIC:  # by far the most frequent: registrations change topics by the thousand
            self.routes.pop(name, None)  # type: ignore[arg-type]
            if self._topic_tables:
                self._topic_tables.clear()
        elif kind == BROKER:
            if self.routes:
                topics = self._state.topicQueueTable
                for topic in [t for t in self.routes if name in topics.get(t, ())]:
                    del self.routes[topic]
            if self.tables[BROKER]:
                self.tables[BROKER].clear()
        else:
            self.clear()

    def forget_topic(self, topic: str) -> None:
        """Anything a route answer for ``topic`` shows changed (also its orderTopicConf)."""
        self.changed(TOPIC, topic)

    def clear(self) -> None:
        """Everything may answer differently (tables replaced, a switch changed)."""
        self.routes.clear()
        for table in self.tables.values():
            table.clear()
        self.replies.clear()
        self._state.on_change = None  # nothing left to drop

    # -- route bodies ---------------------------------------------------------------------------
    def route(self, topic: str | None, variant: Hashable) -> bytes | None:
        bodies = self.routes.get(topic) if topic is not None else None
        return bodies.get(variant) if bodies else None

    def keep_route(self, topic: str, variant: Hashable, body: bytes) -> None:
        """Only found routes: any name can be asked, so misses would grow without bound."""
        if self.keep:
            self.routes.setdefault(topic, {})[variant] = body
            self._subscribe()

    # -- whole tables ---------------------------------------------------------------------------
    def table(self, key: Hashable, shows: str, build: Callable[[], bytes]) -> bytes:
        """The body under ``key`` that ``shows`` TOPIC or BROKER tables, built when missing."""
        kept = self.tables[shows]
        body = kept.get(key)
        if body is None:
            body = build()
            if self.keep:
                kept[key] = body
                self._subscribe()
        return body

    # -- answer frames --------------------------------------------------------------------------
    def reply_to(self, frame: bytes) -> bytes | None:
        """The whole answer frame to a repeated route lookup, or None to decode and dispatch."""
        if not self.replies:
            return None
        split = opaque_split(frame, 4)
        if split is None:
            return None  # decoding says why
        key, opaque = split
        kept = self.replies.get(key)
        if kept is None:
            return None
        topic, variant, body, head, tail = kept
        bodies = self.routes.get(topic)  # self.route(), inline: this runs for every lookup
        if bodies is None or bodies.get(variant) is not body:
            del self.replies[key]
            return None
        return encode_frame(SerializeType.JSON, head + str(opaque).encode() + tail, body)

    def keep_reply(self, frame: bytes, request: RemotingCommand, response: RemotingCommand, encoded: bytes,
                   topic: str, variant: Hashable) -> None:
        """Keep a successful plain JSON route answer (``encoded``: its frame) for reply_to, while
        its body is the one kept for ``topic`` and ``variant`` (only a found route's body is kept,
        and only with ``keep``: the identity check covers both)."""
        body = self.route(topic, variant)
        if (body is None or body is not response.body
                or request.serialize_type != SerializeType.JSON or response.serialize_type != SerializeType.JSON
                or request.body or request.is_oneway or frame.count(OPAQUE_KEY) != 1):
            return
        request_split = opaque_split(frame, 4)
        header = split_frame(memoryview(encoded)[4:])[1]
        opaque = f'"opaque":{response.opaque},'.encode()
        split = header.find(opaque)
        if request_split is None or split < 0:
            return
        if len(self.replies) >= MAX_REPLIES:
            self.replies.clear()
        head, tail = header[:split + len(OPAQUE_KEY)], header[split + len(opaque) - 1:]
        self.replies[request_split[0]] = (topic, variant, body, head, tail)
