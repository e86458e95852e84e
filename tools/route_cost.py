#!/usr/bin/env python3
"""What one cycle of a peer that may register costs the reactor's thread when a topic is served by
many broker groups: unregister one of them, register it again, look the topic up (its route is
encoded anew after every change), at GROUPS groups named in NAME characters.

usage: tools/route_cost.py [--groups 2000] [--name 512] [--rounds 3] [--zone NAME] [--src DIR]

Registers them into a dispatcher on a fake clock (in process, no port, 5.3.3's shapes), each group
a cluster of its own serving the topic and one of its own, then times the cycle (``time.process_time``,
each round) and counts one cycle's Python calls (cProfile).  ``--src`` runs another checkout's code
(an older commit: the before).  ``--zone NAME``: the groups register in zone Z, a cycle whose
lookup is filtered by zone NAME (any 5.x client's ``__ZONE_MODE``) is timed and counted too, and
that lookup is asked again and again on one connection, as a client repeats it, with no change
between: each repeat timed and counted, beside a plain lookup's repeats."""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--name", type=int, default=512, help="characters of each cluster, group name and address")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--zone", help="also time a lookup filtered by this zone, repeated (the groups are in Z)")
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    sys.path.insert(0, str(args.src))
    from tests.test_processor import Namesrv
    from twisted_namesrv.remoting import RequestCode
    zone = {"__ZONE_NAME": "Z"} if args.zone else None

    ns = Namesrv(Path(tempfile.mkdtemp()), maxNameLength=max(args.name, 512))

    def pad(text: str) -> str:
        return text.ljust(args.name, "x")

    for group in range(args.groups):
        ns.register(cluster=pad(f"c{group}-"), name=pad(f"g{group}-"), addr=pad(f"{group}:"),
                    topics=("T", f"U{group}"), channel=group, extra=zone)

    remembered(ns, args.groups)

    def cycle(counter: int, lookup: dict[str, str]) -> int:
        ns.call(RequestCode.UNREGISTER_BROKER, {"brokerName": pad("g5-"), "brokerAddr": pad("5:"),
                                                "clusterName": pad("c5-"), "brokerId": "0"})
        ns.register(cluster=pad("c5-"), name=pad("g5-"), addr=pad("5:"), topics=("T", "U5"), channel=5,
                    version=(1, counter), extra=zone)
        return len(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup).body)

    lookups = [("a cycle", {"topic": "T"})]
    if args.zone:  # the first lookup filtered by the zone after the group's change
        lookups.append((f"a cycle looking zone {args.zone!r} up", {"topic": "T", "__ZONE_MODE": "true",
                                                                  "__ZONE_NAME": args.zone}))
    counters = iter(range(2, 10**6))
    for what, lookup in lookups:
        size = cycle(next(counters), lookup)
        laps = []
        for _ in range(args.rounds):
            start = time.process_time()
            cycle(next(counters), lookup)
            laps.append(round((time.process_time() - start) * 1000))
        profile = cProfile.Profile()
        profile.enable()
        cycle(next(counters), lookup)
        profile.disable()
        print(f"{args.groups} groups on one topic, names of {args.name}: answer {size} bytes; {what} {laps} ms of "
              f"CPU, {pstats.Stats(profile).total_calls} Python calls; load {os.getloadavg()[0]:.1f}")
    if args.zone:
        for ext in ({"topic": "T"}, {"topic": "T", "__ZONE_MODE": "true", "__ZONE_NAME": args.zone}):
            repeats(ns, ext, args.rounds)


def remembered(ns: object, groups: int) -> None:
    """Fails loudly unless every group registered is in the remembered topology, up to its own
    limit (GROUPS_LIMIT: past it a real server remembers no more either): one refused there for
    another reason (a peer taken as remote: at most 64 groups a remote host) is cheaper to register
    and change than a real one, and the cycle, whose group is among the first, would measure what no
    server does."""
    topology = getattr(ns.state, "topology", None)  # type: ignore[attr-defined]  (an older --src: none)
    expected = min(groups, getattr(topology, "groups_limit", groups))
    if topology is not None and len(topology.groups) < expected:
        raise SystemExit(f"{len(topology.groups):,} broker groups remembered of {groups:,} registered: the cycle "
                         f"would measure refused groups (refused: {topology.refused:,})")


def repeats(ns: object, ext: dict[str, str], rounds: int) -> None:
    """A lookup asked again on one connection (through the server's read path, where a client's
    repeats are answered), each repeat timed and one counted: what a client looping on it costs."""
    from twisted.internet.address import IPv4Address
    from twisted.internet.testing import StringTransport

    from tests import built
    from twisted_namesrv.remoting import RemotingCommand, RequestCode
    from twisted_namesrv.remoting.codes import V5_3_3

    peer = IPv4Address("TCP", "127.0.0.1", 40001)  # a client of this machine, as the registrations' peer
    protocol = built.factory(ns.dispatcher, ns.clock, 1 << 27, 0).buildProtocol(peer)  # type: ignore[attr-defined]
    transport = StringTransport(peerAddress=peer)
    protocol.makeConnection(transport)
    opaques = iter(range(10**6, 10**7))

    def frame() -> bytes:  # (the client's work, not timed)
        return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, opaque=next(opaques),
                                       version=V5_3_3).encode()

    protocol.dataReceived(frame())
    size = len(transport.value())
    laps = []
    for _ in range(rounds):
        request = frame()
        transport.clear()
        start = time.process_time()
        protocol.dataReceived(request)
        laps.append(round((time.process_time() - start) * 1000, 3))
    request = frame()
    profile = cProfile.Profile()
    profile.enable()
    protocol.dataReceived(request)
    profile.disable()
    print(f"{ext.get('__ZONE_NAME', 'no zone')!r}: answer {size} bytes; a repeat {laps} ms of CPU, "
          f"{pstats.Stats(profile).total_calls} Python calls; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
