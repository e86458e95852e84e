"""A route body (GET_ROUTEINFO_BY_TOPIC's TopicRouteData) joined of pieces encoded once, so that a
lookup after a change of one broker group encodes that group's entries, not the route.

Any peer that may register (any peer without ACL) can put up to ``maxBrokerGroups`` groups on one
real topic, and every lookup after a change of one of them encoded the whole route again on the
reactor's thread: about 275 Python calls a group, 5.5 M calls and 1.2 s of CPU at 20,000 groups
named in 512 characters, for a cycle of one group (unregister, register, lookup).  Here each
BrokerData and QueueData is encoded once per JSON style and kept by what it holds (its content is
its key: a piece can never be stale, so nothing need tell it of changes), and a body is the join
of its pieces in the route's order: a Python step a group (its key and a look-up), C-level
otherwise.  The bytes are
``fastjson.dumps_bytes(topic_route_bean(...))``'s (tests/test_route_pieces.py, and the differential
tests of tests/test_answer_cache.py against a server that keeps nothing).

The pieces are bounded as the tables are (a few per group and JSON style) and in bytes, keys
included (``PIECES_MAX_BYTES``): past either bound they start over, costing the next lookups their
encoding, as before.  The AnswerCache owns one.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from .bodies.route import BrokerData, QueueData, topic_route_bean
from .remoting import fastjson

#: the bytes the pieces may hold, past which they start over, each counted twice (its bytes, and
#: about as many characters in its key, which keeps the names of a group gone) and ``KEY_BYTES``
#: more: the BrokerData and QueueData of 20,000 groups named in 512 characters are 44 MB a JSON
#: style, 96 MB counted (the process grew 103 MB)
PIECES_MAX_BYTES = 256 << 20
#: what a piece's key (a tuple, its addresses' tuples) and its dict entry take beside its names
KEY_BYTES = 200
#: the pieces kept beyond four a group of the tables (two JSON styles, a BrokerData and a QueueData
#: or two of each), past which they start over
SPARE_PIECES = 4096


class RoutePieces:
    """The kept pieces of one server's route bodies (module docstring); ``encoded`` counts the
    pieces encoded since it was made (what a lookup costs, read by the tests)."""

    def __init__(self) -> None:
        #: each piece by (JSON style, v5 shape, content); what they hold in bytes
        self._pieces: dict[Hashable, bytes] = {}
        self.bytes = 0
        self.encoded = 0
        #: the times the pieces started over past a bound
        self.started_over = 0

    def clear(self) -> None:
        self._pieces.clear()
        self.bytes = 0

    def body(self, queue_datas: Sequence[QueueData], broker_datas: Sequence[BrokerData],
             filter_server_table: dict[str, list[str | None]], order_topic_conf: str | None,
             queue_mapping_by_broker: dict[str, Any] | None, v5: bool, standard: bool, groups: int) -> bytes:
        """``fastjson.dumps_bytes(topic_route_bean(...), standard)``, joined of kept pieces;
        ``groups``: how many groups the tables hold (the pieces' bound)."""
        brokers, queues = self.pieces_of(broker_datas, queue_datas, v5, standard, groups)
        return self.join(brokers, queues, filter_server_table, order_topic_conf, queue_mapping_by_broker, v5, standard)

    def pieces_of(self, broker_datas: Sequence[BrokerData], queue_datas: Sequence[QueueData], v5: bool,
                  standard: bool, groups: int) -> tuple[list[bytes], list[bytes]]:
        """Each BrokerData's and QueueData's piece, in order (encoded when not kept)."""
        if len(self._pieces) > 4 * groups + SPARE_PIECES or self.bytes > PIECES_MAX_BYTES:
            self.clear()
            self.started_over += 1
        pieces = self._pieces
        brokers = []
        for b in broker_datas:  # a BrokerData's key: what its piece shows (its dict's items, a tuple)
            key = (standard, v5, b.cluster, b.brokerName, tuple(b.brokerAddrs.items()), b.zoneName,
                   b.enableActingMaster)
            brokers.append(pieces.get(key) or self._keep(key, fastjson.dumps_bytes(b.bean(v5), standard)))
        queues = [pieces.get((standard, q)) or self._keep((standard, q), fastjson.dumps_bytes(q.bean(), standard))
                  for q in queue_datas]
        return brokers, queues

    @staticmethod
    def join(brokers: Sequence[bytes], queues: Sequence[bytes], filter_server_table: dict[str, list[str | None]],
             order_topic_conf: str | None, queue_mapping_by_broker: dict[str, Any] | None, v5: bool,
             standard: bool) -> bytes:
        """The body of these pieces (``pieces_of``'s, in the route's order)."""
        # the rest of the bean (filter servers, orderTopicConf, static topics' mappings) is
        # small and encoded as it is, between the two lists (the bean's keys are in order)
        rest = fastjson.dumps_bytes(topic_route_bean((), (), filter_server_table, order_topic_conf,
                                                     queue_mapping_by_broker, v5), standard)
        middle, _, end = rest[len(b'{"brokerDatas":[]'):].partition(b'"queueDatas":[]')
        return b'{"brokerDatas":[%s]%s"queueDatas":[%s]%s' % (b",".join(brokers), middle, b",".join(queues), end)

    def _keep(self, key: Hashable, piece: bytes) -> bytes:
        self._pieces[key] = piece
        self.bytes += 2 * len(piece) + KEY_BYTES
        self.encoded += 1
        return piece
