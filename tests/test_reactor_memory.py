"""The reactor's sets of descriptors (reactor._Sets) hold no table a burst grew once it is over: a
set keeps the table it grew to, and 5,000 brokers connecting at once grew the newcomers' two to
512 KiB each, held after their first reads; emptied, each is made anew. The brokers' descriptors,
which stay, and Twisted's record of every connection read are a dict's keys: a set keeps a table four
times its count."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.test_reactor import Factory, connect, turn
from twisted_namesrv import reactor as namesrv_reactor

pytestmark = pytest.mark.skipif(namesrv_reactor.NamesrvReactor is None, reason="the server's reactor needs epoll")

BURST = 45  # within the listening backlog (50): all connect before the reactor turns


@pytest.fixture
def reactor() -> Any:
    r = namesrv_reactor.NamesrvReactor()
    yield r
    for selectable in list(r.getReaders()) + list(r.getWriters()):
        r.removeReader(selectable)
        r.removeWriter(selectable)
    r._poller.close()


def test_the_newcomers_sets_give_their_burst_tables_back_after_the_first_reads(reactor: Any) -> None:
    factory = Factory()
    clients = connect(reactor, factory, BURST)
    sets = reactor._sets
    assert len(sets.in_newcomers) == BURST and sys.getsizeof(sets.in_newcomers) > 2_000  # grown by the burst
    for index, client in enumerate(clients):  # each one's first read a registration: to the brokers' set
        client.sendall(b"register broker%d" % index)
    for _ in range(200):
        turn(reactor)
        if len(factory.served) == BURST:
            break
    assert len(factory.served) == BURST
    assert sets.in_newcomers == set() and sets.reported == set()
    assert sys.getsizeof(sets.in_newcomers) + sys.getsizeof(sets.reported) < 1_000  # not the burst's 2 x 2 KiB+
    assert len(sets.in_brokers) == BURST and type(sets.in_brokers) is dict  # (a set: 4x its count in slots)
    # Twisted's record of what it reads, every connection: a dict's keys too, added and removed in C
    assert type(reactor._reads) is namesrv_reactor.Descriptors and set(sets.in_brokers) <= reactor._reads.keys()
    assert namesrv_reactor.Descriptors.add is dict.setdefault and namesrv_reactor.Descriptors.remove is dict.pop
    for client in clients:
        client.close()
    for _ in range(BURST):
        turn(reactor)
        if not sets.in_brokers:
            break
    assert sets.in_brokers == {} and sys.getsizeof(sets.in_brokers) < 1_000

