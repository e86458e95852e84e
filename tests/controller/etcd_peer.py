"""A controller peer in its own process, for the tests that kill one with SIGKILL.

    python tests/controller/etcd_peer.py ENDPOINT KEY_PREFIX GROUP ADDRESS TTL EVENTS

Joins the group; once it leads, appends EVENTS events (b"event-1" ...) one per append, prints
``appended N term T`` and then runs until killed. Prints ``follower LEADER`` if another leads.
"""

from __future__ import annotations

import sys

from twisted.internet import reactor
from twisted.internet.defer import Deferred

from twisted_namesrv.controller.etcd import EtcdConsensus


def say(line: str) -> None:
    print(line, flush=True)


async def main(endpoint: str, key_prefix: str, group: str, address: str, ttl: int, count: int) -> None:
    consensus = EtcdConsensus([endpoint], key_prefix, group, address, ttl, reactor)
    await consensus.start()
    leadership = consensus.leadership
    if not leadership.is_leader:
        say(f"follower {leadership.leader_address}")
        return
    await consensus.log.replay()
    for i in range(1, count + 1):
        await consensus.log.append([f"event-{i}".encode()])
    say(f"appended {count} term {leadership.term}")


def run() -> None:
    endpoint, key_prefix, group, address, ttl, count = sys.argv[1:7]

    def failed(failure: object) -> None:
        say(f"failed {failure}")
        reactor.stop()  # type: ignore[attr-defined]

    Deferred.fromCoroutine(main(endpoint, key_prefix, group, address, int(ttl), int(count))).addErrback(failed)
    reactor.run()  # type: ignore[attr-defined]


if __name__ == "__main__":
    run()
