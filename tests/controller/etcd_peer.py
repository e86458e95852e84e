"""A controller peer on etcd in its own process, driven line by line: the harness
(tests/controller/etcd_harness.py) kills these with SIGKILL.

    python tests/controller/etcd_peer.py ENDPOINT KEY_PREFIX GROUP ADDRESS TTL

Writes one JSON object per line: ``{"status": "leader"|"follower", "leader": ADDRESS|null, "term": N|null}``
at start and on every change of the leadership; for each command read from stdin, its answer:

    append TEXT   ->  {"appended": TEXT}  or  {"refused": LEADER|null}
    replay        ->  {"events": [TEXT, ...]}
"""

from __future__ import annotations

import json
import sys
from typing import Any

from twisted.internet import reactor, stdio
from twisted.internet.defer import Deferred
from twisted.logger import globalLogBeginner, textFileLogObserver
from twisted.protocols.basic import LineReceiver

from twisted_namesrv.controller.etcd import EtcdConsensus
from twisted_namesrv.controller.log import NotLeader


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class Commands(LineReceiver):
    delimiter = b"\n"

    def __init__(self, consensus: EtcdConsensus) -> None:
        self.consensus = consensus

    def lineReceived(self, line: bytes) -> None:
        command, _, argument = line.decode().strip().partition(" ")
        Deferred.fromCoroutine(self.run(command, argument)).addErrback(
            lambda failure: say(error=failure.getErrorMessage()))

    async def run(self, command: str, argument: str) -> None:
        if command == "append":
            try:
                await self.consensus.log.append([argument.encode()])
            except NotLeader as exc:
                say(refused=exc.leader_address)
            else:
                say(appended=argument)
        elif command == "replay":
            events = await self.consensus.log.replay()
            say(events=[event.decode() for event in events])
        else:
            say(error=f"unknown command {command!r}")

    def connectionLost(self, reason: object = None) -> None:
        reactor.stop()  # type: ignore[attr-defined]  # stdin closed: the harness is done with us


def main() -> None:
    endpoint, key_prefix, group, address, ttl = sys.argv[1:6]
    # the leadership's log on stderr (shown with a failing test); stdout stays ours
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    consensus = EtcdConsensus([endpoint], key_prefix, group, address, int(ttl), reactor)
    leadership = consensus.leadership

    def status(is_leader: bool, leader: str | None) -> None:
        say(status="leader" if is_leader else "follower", leader=leader, term=leadership.term)

    leadership.subscribe(status)

    def started(_: object) -> None:
        status(leadership.is_leader, leadership.leader_address)
        stdio.StandardIO(Commands(consensus))

    consensus.start().addCallbacks(started, lambda failure: say(error=failure.getErrorMessage()))
    reactor.run()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
