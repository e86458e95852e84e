"""The report's pictures list one broker's stays in time order. They tied on the broker's names and
kept the order they were chosen in, where a stay ended by the NameServer's stop comes after those that
ended alive or unregistered: a NameServer restarted twice (v5-zring-nflog) showed broker-a's stays as
05:08, 05:09, 05:05."""

from __future__ import annotations

from spark_analysis.output import report


def _stay(first_seen: float, ended: str) -> dict:
    return {"registrations": 3, "ended": ended, "would_expire": 0, "near_expiry": 0, "cluster": "DefaultCluster",
            "broker_name": "broker-a", "broker_id": 0, "broker_addr": "127.0.0.1:11911", "first_seen": first_seen}


def test_a_broker_s_stays_are_shown_in_time_order_however_each_ended() -> None:
    stays = [_stay(300.0, "server_stopped"), _stay(500.0, "unregistered"), _stay(600.0, "alive")]
    assert [b["first_seen"] for b in report.plotted_brokers(stays[::-1])] == [300.0, 500.0, 600.0]
