"""The status page's recent events (events.py): one peer host lists at most EVENTS_PER_HOST events a
minute, the rest of its minute one ``more`` event with their count, so a peer sending an audited
request in a loop cannot push the other peers' events (a broker that left) out of the 200 kept; a
host's brokers coming and going at a broker's pace are all listed.  On a fake clock, by counts."""

from __future__ import annotations

from tests.test_housekeeping import register
from tests.web.test_metrics_and_api import Served, value
from twisted_namesrv.events import EVENTS_PER_HOST, HOST_WINDOW_SECONDS, MORE, RECENT_EVENTS, RecentEvents
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.state.hosts import KeptHosts


def test_one_host_s_audited_loop_keeps_the_other_hosts_events_on_the_page(tmp_path):
    """500 DELETE_KV_CONFIG of a key no one has (each an audit event) from 10.9.9.9 after a broker of
    10.1.1.1 registered and closed its connection: before, the page's 200 events were all the loop's
    audit rows and the broker's two were gone; now the loop lists 20 and one ``more ×480``."""
    served = Served(tmp_path)
    proto, transport = served.connect("10.1.1.1")
    register(proto, transport, addr="10.1.1.1:10911")
    transport.loseConnection()
    served.clock.advance(0)  # its broker leaves at the reactor's next turn
    loop, loop_transport = served.connect("10.9.9.9")
    for opaque in range(500):
        loop.dataReceived(RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "n", "key": "k"},
                                                  opaque=opaque, version=V5_3_3).encode())
    events = served.api.events()["events"]
    assert [e["kind"] for e in events if e.get("broker") == "broker-a"] == ["registered", "closed"]
    assert sum(e["kind"] == "audit" for e in events) == EVENTS_PER_HOST
    (more,) = [e for e in events if e["kind"] == MORE]
    assert (more["host"], more["count"], more["kinds"]) == ("10.9.9.9", 500 - EVENTS_PER_HOST, {"audit": 480})
    assert events[-1] is more and more["seq"] == 2 + 500  # the newest, numbered as the last it folded
    assert "480 more events from 10.9.9.9 this minute" in more["reason"]
    # every one is still counted (and logged): only the page's list is spared
    assert value(served.scrape(), "namesrv_admin_requests_total", operation="delete_kv_config", result="ok") == 500

    served.clock.advance(HOST_WINDOW_SECONDS)  # a new minute: 20 more listed, then a new ``more``
    for opaque in range(30):
        loop.dataReceived(RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "n", "key": "k"},
                                                  opaque=opaque, version=V5_3_3).encode())
    events = served.api.events()["events"]
    assert [e["count"] for e in events if e["kind"] == MORE] == [480, 10]
    assert len(events) == 2 + 2 * EVENTS_PER_HOST + 2


def test_a_host_s_brokers_come_and_go_each_listed_and_a_flood_of_them_folds():
    """Ten brokers of one host registering and expiring within a minute are 20 events, all listed. A
    host registering 200 fake brokers under addresses of its choosing, which then all close, lists 20
    of them: their departures count against the host that registered them, not the addresses they
    wrote. A loopback connection's events (this machine's tools) count against no host."""
    now = [1000.0]
    events = RecentEvents(lambda: now[0], KeptHosts())
    for number in range(10):
        events.route_event("registered", {"broker": f"b{number}", "addr": f"10.2.2.2:{10911 + number}"},
                           f"10.2.2.2:{40000 + number}")
    for number in range(10):
        events.route_event("expired", {"broker": f"b{number}", "addr": f"10.2.2.2:{10911 + number}"})
    assert [e.kind for e in events.recent] == ["registered"] * 10 + ["expired"] * 10
    fakes = [{"broker": f"x{number}", "addr": f"192.0.2.{number}:1"} for number in range(RECENT_EVENTS)]
    for info in fakes:
        events.route_event("registered", info, "10.3.3.3:5000")
    for info in fakes:
        events.route_event("closed", info)
    assert [e.kind for e in events.recent][:20] == ["registered"] * 10 + ["expired"] * 10  # still there
    (more,) = [e for e in events.recent if e.kind == MORE]
    assert more.info["host"] == "10.3.3.3" and more.count == 2 * RECENT_EVENTS - EVENTS_PER_HOST
    assert more.info["kinds"] == {"registered": RECENT_EVENTS - EVENTS_PER_HOST, "closed": RECENT_EVENTS}
    for _ in range(RECENT_EVENTS):  # this machine's own
        events.feed_event("audit", {"peer": "127.0.0.1:6000"}, "127.0.0.1:6000")
    assert sum(e.kind == "audit" for e in events.recent) == RECENT_EVENTS
    now[0] -= 3600  # a wall clock stepped back: a new minute, not an hour of one
    for number in range(EVENTS_PER_HOST + 1):
        events.route_event("registered", {"broker": f"y{number}", "addr": "192.0.2.1:1"}, "10.3.3.3:5000")
    assert [e.kind for e in events.recent][-2:] == ["registered", MORE] and events.recent[-1].count == 1
