"""Per-host rules key an IPv6 peer by its /64 (state/hosts.py: peer_group).  One IPv6 host holds a
whole /64: keyed by the address, a peer rotating through it was a new host each connection -- a
warning line per refused connection, a push failure line per address, a search budget per address."""

from __future__ import annotations

import pytest
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import LogLevel, globalLogPublisher
from twisted.python.failure import Failure

from twisted_namesrv.refusals import Refusals
from twisted_namesrv.server import Notifier
from twisted_namesrv.state.hosts import HOSTS_KEPT, KeptHosts, peer_group
from twisted_namesrv.web.searches import SearchBudget


@pytest.fixture
def warnings():
    seen: list[dict] = []

    def observe(event: dict) -> None:
        if event.get("log_level") == LogLevel.warn:
            seen.append(event)
    globalLogPublisher.addObserver(observe)
    yield seen
    globalLogPublisher.removeObserver(observe)


@pytest.mark.parametrize(("host", "group"), [
    ("10.1.2.3", "10.1.2.3"),
    ("::ffff:10.1.2.3", "10.1.2.3"),
    ("[::ffff:10.1.2.3]", "10.1.2.3"),
    ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
    ("[2001:db8:1:2::9]", "2001:db8:1:2::/64"),
    ("::1", "::/64"),
    ("fe80::1%eth0", "fe80::/64"),
    ("broker.example", "broker.example"),
    ("?", "?"),
])
def test_a_peer_group_is_an_ipv4_address_or_an_ipv6_64(host: str, group: str) -> None:
    assert peer_group(host) == group


def test_a_peer_rotating_through_its_64_is_one_warning(warnings) -> None:
    refusals = Refusals()
    for number in range(1, 501):  # 500 connections, each from another address of one /64
        refusals("remoting", "not_tls", f"[2001:db8:1:2::{number:x}]:40000", "plain text on a TLS port")
    refusals("remoting", "not_tls", "[2001:db8:1:3::1]:40000", "plain text on a TLS port")  # another /64
    refusals("remoting", "not_tls", "10.0.0.7:1", "plain text on a TLS port")
    refusals("remoting", "not_tls", "[::ffff:10.0.0.7]:2", "plain text on a TLS port")  # the same IPv4 host
    assert [w["host"] for w in warnings] == ["2001:db8:1:2::/64", "2001:db8:1:3::/64", "10.0.0.7"]
    assert "further hits of this limit from 2001:db8:1:2::/64 are counted" in warnings[0]["log_format"].format(
        **warnings[0])
    assert refusals.counts["remoting", "not_tls"] == 503  # every one counted


def test_a_peer_written_without_brackets_is_its_host_not_its_port(warnings) -> None:
    """The TLS port, the descriptor and connection limits, the HTTP side and the remoting peer write
    ``host:port`` with an IPv6 host bare (Twisted's address): ``2001:db8:1:2::1:55497`` was taken
    whole as the host, so every connection, even from one address, was a warning line of its own
    (41 connections from 41 addresses of two /64s: 41 lines, in a network namespace)."""
    refusals = Refusals()
    for number in range(1, 41):
        refusals("remoting", "not_tls", f"2001:db8:1:2::{number:x}:{40000 + number}", "plain text on a TLS port")
    refusals("remoting", "not_tls", "2001:db8:1:3::1:40000", "plain text on a TLS port")
    refusals("http", "host", "::ffff:10.0.0.7:5", "a foreign Host")
    refusals("http", "host", "10.0.0.7:6", "a foreign Host")
    refusals("http", "host", "?:?", "no address")
    assert [w["host"] for w in warnings] == ["2001:db8:1:2::/64", "2001:db8:1:3::/64", "10.0.0.7", "?"]


def test_push_failures_to_one_64_are_one_warning(warnings) -> None:
    reactor = MemoryReactorClock()
    pushes = Notifier(reactor, "notify min broker id change", limit=2)
    for number in range(1, 101):  # brokers registered at addresses of one /64: past 2 in flight, dropped
        pushes(f"[2001:db8:9:9::{number:x}]:10911", b"frame")
    pushes("[2001:db8:9:a::1]:10911", b"frame")
    _, _, factory, _, _ = reactor.tcpClients[0]
    factory.clientConnectionFailed(reactor.connectors[0], Failure(ConnectionRefusedError()))
    reactor.advance(0)
    assert pushes.counts["dropped"] == 99 and pushes.counts["failed"] == 1
    assert [(w["host"], w["limit"]) for w in warnings] == [
        ("2001:db8:9:9::/64", "dropped"), ("2001:db8:9:a::/64", "dropped"), ("2001:db8:9:9::/64", "failed")]


def test_the_search_budget_per_client_holds_for_a_whole_64() -> None:
    budget = SearchBudget(per_client=2, total=16)
    assert budget.take("2001:db8::1") is None and budget.take("2001:db8::2") is None
    refused = budget.take("2001:db8::3")
    assert refused is not None and refused.reason == "search_per_client"
    assert budget.take("2001:db8:0:1::1") is None  # another /64, another client
    budget.release("2001:db8::2")
    assert budget.take("2001:db8::4") is None
    assert budget.held == {"2001:db8::/64": 2, "2001:db8:0:1::/64": 1}


def test_a_peer_owning_many_hosts_gets_a_bounded_number_of_warnings_an_hour(warnings) -> None:
    """The refusal log remembered 10,000 (host, limit) pairs and forgot them all when full: a /48
    (65,536 /64s) or many IPv4 hosts going round again got a warning line per connection without end.
    Full, it now says so once and logs a new host's first refusal as debug (counted as ever) until an
    hour after it last forgot (a monotonic clock: an NTP step moves nothing)."""
    from twisted_namesrv.refusals import LimitLog

    now = [1000.0]
    limit_log = LimitLog(now=lambda: now[0])
    for n in range(6 * LimitLog.CAPACITY):  # three rounds of the same 20,000 /64s: 60,000 lines before
        limit_log(f"2001:db8:0:{n % (2 * LimitLog.CAPACITY):x}::1", "max_connections", "refused {host}")
    assert len(warnings) == LimitLog.CAPACITY + 1
    assert "more than 10000 hosts" in warnings[-1]["log_format"].format(**warnings[-1])
    now[0] += LimitLog.RENEWED_SECONDS
    limit_log("2001:db8:1:1::1", "max_connections", "refused {host}")
    assert len(warnings) == LimitLog.CAPACITY + 2 and warnings[-1]["host"] == "2001:db8:1:1::/64"


def test_kept_hosts_count_a_peer_by_its_group_and_a_written_address_as_written() -> None:
    """A connection's peer counts under its group, none on loopback (this machine's own); a broker's
    address as it wrote it counts under its group whatever it is (a remote peer may write 127.0.0.1).
    Kept by the address without its port, the table started over when full: bounded by HOSTS_KEPT
    however many addresses a peer rotates through."""
    hosts = KeptHosts()
    assert hosts.peer("2001:db8::1:40000") == hosts.peer("2001:db8::1:40001") == "2001:db8::/64"
    assert hosts.peer("127.0.0.1:40000") is None and hosts.peer("?") is None
    assert hosts.broker("127.0.0.1:10911") == "127.0.0.1" and hosts.broker("[::ffff:10.0.0.1]:1") == "10.0.0.1"
    assert hosts.peers == {"2001:db8::1": "2001:db8::/64", "127.0.0.1": None, "?": None}
    for number in range(HOSTS_KEPT + 10):
        hosts.peer(f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}:1")
    assert len(hosts.peers) <= HOSTS_KEPT
