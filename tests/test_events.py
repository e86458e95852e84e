"""The status page's recent events (events.py): one peer host lists at most EVENTS_PER_HOST events a
minute, the rest of its minute one ``more`` event with their count, so a peer sending an audited
request in a loop cannot push the other peers' events (a broker that left) out of the 200 kept; a
host's brokers coming and going at a broker's pace are all listed.  On a fake clock, by counts."""

from __future__ import annotations

from tests.test_housekeeping import register
from tests.web.test_metrics_and_api import Served, value
from twisted_namesrv.events import (
    ALL_HOSTS,
    EVENTS_PER_HOST,
    EVENTS_PER_MINUTE,
    HOST_WINDOW_SECONDS,
    LINES_FOLDED_PER_MINUTE,
    LINES_KEPT_FOR_HOSTS,
    LINES_PER_HOST,
    MORE,
    RECENT_EVENTS,
    RecentEvents,
)
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


def test_many_hosts_together_list_sixty_rows_a_minute_and_one_all_hosts_row(monkeypatch):
    """100 hosts each making 5 events within their own 20 a minute (or one peer owning 100 /64s) fill
    60 rows and fold the other 440 into one ``all hosts: 440 more`` row; before, they took all 200
    rows and a loopback broker's event before them was gone.  Loopback events stay listed past it; a
    new minute lists 60 again."""
    now = [1000.0]
    events = RecentEvents(lambda: now[0], KeptHosts())
    events.route_event("closed", {"broker": "local", "addr": "127.0.0.1:10911"}, "127.0.0.1:40000")
    for number in range(500):
        events.feed_event("audit", {"n": number}, f"10.5.{number // 5}.1:{4000 + number % 5}")
    rows = list(events.recent)
    assert rows[0].info["broker"] == "local"
    assert sum(e.kind == "audit" for e in rows) == EVENTS_PER_MINUTE
    (more,) = [e for e in rows if e.kind == MORE]
    assert (more.info["host"], more.count, more.info["kinds"]) == (ALL_HOSTS, 440, {"audit": 440})
    assert more.info["reason"].startswith("all hosts: 440 more events this minute, past the 60 rows")
    assert events.feed_event("audit", {}, "127.0.0.1:1") and events.recent[-1].kind == "audit"
    now[0] += HOST_WINDOW_SECONDS
    for number in range(EVENTS_PER_MINUTE):
        events.feed_event("audit", {"n": number}, f"10.6.{number}.1:4000")
    assert [e.kind for e in events.recent][-EVENTS_PER_MINUTE:] == ["audit"] * EVENTS_PER_MINUTE


def test_a_host_past_its_rows_takes_a_more_row_only_while_the_minute_has_rows():
    """Three hosts flood: each lists 20 and makes its ``more`` row while rows are left; the 60 rows
    taken, a fourth host's events and a flooding host's with no ``more`` row yet fold into ``all hosts``."""
    events = RecentEvents(lambda: 1000.0, KeptHosts())
    for host in range(4):
        for number in range(30):
            events.feed_event("audit", {"n": number}, f"10.7.{host}.1:4000")
    more = {e.info["host"]: e.count for e in events.recent if e.kind == MORE}
    # hosts 0 and 1: 20 rows and a ``more`` row each (42 rows); host 2: 18 rows, then all hosts'
    assert more == {"10.7.0.1": 10, "10.7.1.1": 10, ALL_HOSTS: 12 + 30}
    assert sum(e.kind == "audit" for e in events.recent) == EVENTS_PER_MINUTE - 2


def test_a_flood_s_folded_lines_stop_at_the_minute_s_budget_and_are_counted():
    """One host making audited events as fast as it can: its 20 listed events are logged, and its
    folded ones while the minute's lines are within LINES_FOLDED_PER_MINUTE but the LINES_KEPT_FOR_HOSTS
    kept for other hosts' first lines (the callers write a line when told so); the rest not, counted in
    ``lines_not_logged`` and on its ``more`` row, the first of them told once; a new minute logs again.
    A broker whose data version changes at every registration, from a remote peer, is one row whose
    folds are held to the same budget: its host's first lines from what was kept; a loopback one's are
    always logged."""
    now = [1000.0]
    told: list[tuple[str, str]] = []
    events = RecentEvents(lambda: now[0], KeptHosts(), lambda level, text: told.append((level, text)))
    flood_lines = LINES_FOLDED_PER_MINUTE - LINES_KEPT_FOR_HOSTS
    flood = EVENTS_PER_HOST + flood_lines + 500
    logged = [events.feed_event("audit", {"n": number}, "10.8.8.8:4000") for number in range(flood)]
    assert logged == [True] * (EVENTS_PER_HOST + flood_lines) + [False] * 500
    assert events.lines_not_logged == 500
    (more,) = [e for e in events.recent if e.kind == MORE]
    assert more.info["not_logged"] == 500 and more.info["reason"].endswith(", 500 of them not logged)")
    ((level, text),) = told
    assert level == "warn" and "first from 10.8.8.8" in text and "namesrv_event_lines_not_logged_total" in text
    info = {"cluster": "c1", "broker": "b", "addr": "10.9.0.1:10911", "topics": 4}
    assert events.route_event("changed", info, "10.9.0.1:50000")  # its row: listed
    for _ in range(LINES_PER_HOST):  # its folds: its host's first lines, from what was kept...
        assert events.route_event("changed", info, "10.9.0.1:50000")
    assert not events.route_event("changed", info, "10.9.0.1:50000")  # ...and then no more this minute
    assert events.route_event("changed", info, "127.0.0.1:50000")  # but for this machine's own
    assert events.lines_not_logged == 501 and [e.count for e in events.recent if e.kind == "changed"] == [23]
    assert len(told) == 1  # once a minute
    now[0] += HOST_WINDOW_SECONDS
    assert events.route_event("changed", info, "10.9.0.1:50000")
    assert events.feed_event("audit", {}, "10.8.8.8:4000") and events.lines_not_logged == 501


def test_hosts_flooding_together_leave_a_quiet_host_its_first_lines():
    """Three hosts flooding together spend the minute's lines but the LINES_KEPT_FOR_HOSTS kept:
    a fourth, quiet host's first LINES_PER_HOST lines of that minute are still written (its events
    fold into the ``all hosts`` row, the rows being taken), its further ones not; the lines of the
    minute never pass LINES_FOLDED_PER_MINUTE, whatever the hosts."""
    now = [1000.0]
    events = RecentEvents(lambda: now[0], KeptHosts())
    written = 0
    for number in range(3 * LINES_FOLDED_PER_MINUTE):
        written += events.feed_event("audit", {"n": number}, f"10.8.{number % 3}.8:4000")
    assert written == EVENTS_PER_MINUTE + LINES_FOLDED_PER_MINUTE - LINES_KEPT_FOR_HOSTS
    quiet = [events.feed_event("audit", {"n": number}, "10.5.5.5:4000") for number in range(LINES_PER_HOST + 5)]
    assert quiet == [True] * LINES_PER_HOST + [False] * 5
    assert events.request_line("10.6.6.6:4000")  # a request's own line takes its host's share too
    written += LINES_PER_HOST + 1
    # hosts enough to take what was kept each take their first lines, and then the minute's lines are spent
    for host in range(LINES_KEPT_FOR_HOSTS // LINES_PER_HOST):
        for _ in range(LINES_PER_HOST):
            written += events.request_line(f"10.7.{host}.1:4000")
    assert written == EVENTS_PER_MINUTE + LINES_FOLDED_PER_MINUTE
    assert not events.request_line("10.4.4.4:4000")
    assert events.request_line("127.0.0.1:4000")  # this machine's own: always


def test_a_flood_of_audited_requests_writes_a_bounded_number_of_lines_and_counts_the_rest(tmp_path, monkeypatch):
    """Through the server: a peer's audited loop is 20 rows and one ``more``, its log lines stop at the
    minute's folded budget (here 30), the rest counted by ``namesrv_event_lines_not_logged_total``;
    every request is still counted by ``namesrv_admin_requests_total``."""
    from twisted.logger import capturedLogs

    from twisted_namesrv import events as events_module

    monkeypatch.setattr(events_module, "LINES_FOLDED_PER_MINUTE", 40)
    monkeypatch.setattr(events_module, "LINES_KEPT_FOR_HOSTS", 10)
    served = Served(tmp_path)
    loop, _ = served.connect("10.9.9.9")
    with capturedLogs() as lines:
        for opaque in range(100):
            loop.dataReceived(RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "n", "key": "k"},
                                                      opaque=opaque, version=V5_3_3).encode())
    assert sum("audit" in line for line in lines) == EVENTS_PER_HOST + 30
    samples = served.scrape()
    assert value(samples, "namesrv_event_lines_not_logged_total") == 100 - EVENTS_PER_HOST - 30
    assert value(samples, "namesrv_admin_requests_total", operation="delete_kv_config", result="ok") == 100


def test_java_s_own_lines_of_a_looped_request_are_held_to_the_events_budget(tmp_path, monkeypatch):
    """Java's info line of each WIPE_WRITE_PERM_OF_BROKER, ADD_WRITE_PERM_OF_BROKER and applied
    UPDATE_NAMESRV_CONFIG (which operators' scripts grep) is written as Java writes it, but a remote
    peer's under the events' budget: a loop of them (any peer without ACL) writes its first lines,
    then counts the rest in ``namesrv_event_lines_not_logged_total``, one warning saying so; a loopback
    peer's line and the next minute's are written again.  Every request is still counted."""
    from twisted.logger import capturedLogs, formatEvent

    from twisted_namesrv import events as events_module

    monkeypatch.setattr(events_module, "LINES_FOLDED_PER_MINUTE", 60)
    monkeypatch.setattr(events_module, "LINES_KEPT_FOR_HOSTS", 10)
    served = Served(tmp_path)
    loop, _ = served.connect("10.9.9.9")
    requests = [(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b"}, None),
                (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "b"}, None),
                (RequestCode.UPDATE_NAMESRV_CONFIG, {}, b"orderMessageEnable=true")]

    def sent(times: int, proto=loop) -> list[str]:
        with capturedLogs() as lines:
            for opaque in range(times):
                code, ext, body = requests[opaque % 3]
                proto.dataReceived(RemotingCommand.request(code, ext, body, opaque=opaque, version=V5_3_3).encode())
        return [formatEvent(line) for line in lines]

    lines = sent(99)
    java = [line for line in lines if line.startswith(("wipe write perm", "add write perm", "updateNamesrvConfig"))]
    audit = [line for line in lines if line.startswith("audit ")]
    # the host's first 20 requests: Java's 20 lines and 20 listed audit lines; then the two a request
    # alternate in what is left to a host past its first 20 lines (60 - 10 kept): 15 requests more
    assert (len(java), len(audit)) == (EVENTS_PER_HOST + 15, EVENTS_PER_HOST + 15)
    assert [line[:4] for line in java[:3]] == ["wipe", "add ", "upda"]
    (warning,) = [line for line in lines if "past this minute's budget" in line]
    assert "first from 10.9.9.9" in warning
    samples = served.scrape()
    assert value(samples, "namesrv_event_lines_not_logged_total") == 2 * 99 - len(java) - len(audit)
    assert value(samples, "namesrv_admin_requests_total", operation="wipe_write_perm", result="ok") == 33
    assert value(samples, "namesrv_admin_requests_total", operation="update_namesrv_config", result="ok") == 33
    local, _ = served.connect("127.0.0.1")
    assert sum(line.startswith("wipe write perm") for line in sent(1, local)) == 1  # this machine's own: always
    served.clock.advance(HOST_WINDOW_SECONDS)
    assert sum(line.startswith("wipe write perm") for line in sent(1)) == 1  # a new minute
