"""A registration's whole effect, held to what it was before the first registration's path was cut
(issue 47): randomized sequences of registrations (new brokers, the same again, new dataVersions,
changed tables, slaves, 5.x prime slaves, plans gone stale, in steps or in one go) with departures,
unregistrations, expiry and permission changes between, through the routes wired as the
composition root wires them (service.build: the answer cache, the log line, the page's events, the
metrics, the departures, the topology).  After every operation the tables, the route events heard,
their log lines and the topology's entries are written down; at the end the metrics text too.  The
transcript of each sequence is compared with the one recorded at 73e2e09, before the cuts
(tests/data/registration_equivalence.json: a SHA-1 of each operation's lines, and the last
operation's lines in full, so that a difference names the first operation that differs).

Record it again (only when a change of behaviour is meant, and say so in the commit):
``NAMESRV_RECORD_EQUIVALENCE=1 .venv/bin/python -m pytest -q tests/state/test_registration_equivalence.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from twisted.internet import task
from twisted.logger import capturedLogs

from tests.state.test_routes import body, topic
from tests.support import server_config
from twisted_namesrv import compat
from twisted_namesrv.bodies.register import RegistrationRefused
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state import registration
from twisted_namesrv.state.registration import SYNC_BROKER_MEMBER_GROUP_PREFIX, RegisterRequest
from twisted_namesrv.state.routes import RouteInfoManager
from twisted_namesrv.steps import run_steps
from twisted_namesrv.web.collector import registry

RECORDED = Path(__file__).resolve().parent.parent / "data" / "registration_equivalence.json"
RECORD = os.environ.get("NAMESRV_RECORD_EQUIVALENCE") == "1"
START = 1_000.0

GROUPS = ["g0", "g1", "g2", "g3"]
CLUSTERS = ["c1", "c2"]
TOPICS = [f"T{i}" for i in range(8)] + GROUPS[:2] + CLUSTERS + [SYNC_BROKER_MEMBER_GROUP_PREFIX + g for g in GROUPS[:2]]
PERMS = [6, 6, 6, 4, 2, 7]
#: (profile, deleteTopicWithBrokerRegistration, supportActingMaster) of each sequence, by seed
SEQUENCES = {seed: ([compat.JAVA_4_9_8, compat.JAVA_5_3_3][seed % 2], seed // 2 % 2 == 1, seed // 4 % 2 == 1)
             for seed in range(8)}
OPERATIONS = 160
#: metric families whose text a run of the same operations may not repeat (the process's own)
UNSTEADY = ("process_", "python_", "namesrv_uptime", "namesrv_log_", "namesrv_reactor", "namesrv_memory",
            "namesrv_build_info")


class Run:
    """The routes as the composition root wires them, on a fake clock, and what they said so far."""

    def __init__(self, tmp_path: Path, seed: int) -> None:
        profile, delete, acting = SEQUENCES[seed]
        self.clock = task.Clock()
        self.clock.advance(START)
        config = server_config(tmp_path, compatVersion=profile.name, deleteTopicWithBrokerRegistration=delete,
                               supportActingMaster=acting, metricsPort=9877)
        self.service = NamesrvService.from_config(config, reactor=self.clock)
        self.routes: RouteInfoManager = self.service.state.routes
        seen = self.service.seen
        self.registry = registry(self.service.state, self.service.factory, seen, seen.health)
        self.heard: list[str] = []
        self.routes.listen(lambda kind, info: self.heard.append(f"heard {kind} {sorted(info.items())!r}"))

    def lines(self, logged: list[dict[str, Any]]) -> list[str]:
        """What the operation left: its log lines and events, then every table and count."""
        routes = self.routes
        out = [f"log {event.get('log_text')!r} {event.get('route_event')!r} {event.get('route_info')!r}"
               for event in logged]
        out += self.heard
        self.heard.clear()
        out += [f"queues {t} " + " ".join(f"{g}:{q.readQueueNums}/{q.writeQueueNums}/{q.perm}/{q.topicSysFlag}"
                                          for g, q in sorted(held.items()))
                for t, held in sorted(routes.topicQueueTable.items())]
        out += [f"broker {n} {b.cluster} {sorted(b.brokerAddrs.items())!r} {b.enableActingMaster} {b.zoneName}"
                for n, b in sorted(routes.brokerAddrTable.items())]
        out += [f"cluster {c} {list(names)!r}" for c, names in sorted(routes.clusterAddrTable.items())]
        out += [f"live {k!r} {v.lastUpdateTimestamp} {v.heartbeatTimeoutMillis} {v.dataVersion!r} {v.haServerAddr} "
                f"{[(m.digest.hex(), m.topicCount) for m in v.memos or ()]!r} {v.topicCount} {v.version} "
                f"{v.restored} {v.digest.hex() if v.digest else None}"
                for k, v in sorted(routes.brokerLiveTable.items(), key=repr)]
        out += [f"filters {k!r} {v!r}" for k, v in sorted(routes.filterServerTable.items(), key=repr)]
        out.append(f"counts {sorted(routes.topicsOfGroup.items())!r} {sorted(routes.writableOfGroup.items())!r} "
                   f"{sorted(routes.sealedOfGroup.items())!r} {routes.queueEntries} {routes.mappingEntries}")
        seen = self.service.seen
        out += [f"event {e.seq} {e.ts} {e.kind} {sorted(e.info.items())!r} {e.count} {e.first_ts}"
                for e in list(seen.events.recent)[-3:]]
        out.append(f"route_events {sorted(seen.metrics.route_events.items())!r}")
        out += [f"departed {e.kind} {sorted(e.info.items())!r}" for e in seen.departed.brokers()]
        topology = self.service.state.topology
        out += [f"topology {entry.decode()}" for _, entry in sorted(topology.encoded.items())]
        out.append(f"topology version {topology.version}")
        return out

    def metrics(self) -> list[str]:
        """The metrics text but the process's own families, its comments and its series at 0."""
        text = generate_latest(self.registry).decode()
        return [line for line in text.splitlines()
                if not (line.startswith("#") or line.endswith(" 0.0") or any(part in line for part in UNSTEADY))]


def request(rng: random.Random, counter: int) -> RegisterRequest:
    name = rng.choice(GROUPS)
    broker_id = rng.choice([0, 0, 0, 1, 2])
    addr = f"10.0.{GROUPS.index(name)}.{broker_id}:10911"
    alike = rng.random() < 0.4
    perm = rng.choice(PERMS)
    chosen = rng.sample(TOPICS, rng.randrange(1, len(TOPICS)))
    configs = [topic(t, perm if alike else rng.choice(PERMS)) for t in chosen]
    version = (1, counter if rng.random() < 0.5 else 1)
    digest = hashlib.sha1(repr((name, broker_id, chosen, version)).encode()).digest() if rng.random() < 0.5 else None
    return RegisterRequest(rng.choice(CLUSTERS) if rng.random() < 0.2 else "c1", addr, name, broker_id,
                           rng.choice([None, f"{addr}-ha"]), body(*configs, version=version), channel=addr,
                           zoneName=rng.choice([None, "z1"]), heartbeatTimeoutMillis=rng.choice([None, 30_000]),
                           enableActingMaster=rng.choice([None, True, False]), version=rng.choice([None, 409]),
                           digest=digest)


def transcript(tmp_path: Path, seed: int) -> tuple[list[str], list[str]]:
    """Each operation's lines hashed, and the last operation's lines with the metrics text."""
    rng = random.Random(seed)
    run = Run(tmp_path, seed)
    routes = run.routes
    routes.write_at_once = rng.choice([0, 3, 1000])
    stale: registration.RegistrationPlan | None = None
    last: list[str] = []
    hashed: list[str] = []
    kept: list[RegisterRequest] = []
    for counter in range(1, OPERATIONS + 1):
        action = rng.randrange(14)
        with capturedLogs() as logged:
            try:
                outcome: Any = None
                if action <= 5:  # a registration: in steps (the server's) or in one go
                    req = request(rng, counter)
                    kept.append(req)
                    if rng.random() < 0.7:
                        outcome = routes.apply_registration(run_steps(registration.plan_steps(req, routes)))
                    else:
                        outcome = routes.register_broker(req)
                elif action == 6 and kept:  # the same registration again (a heartbeat)
                    req = rng.choice(kept)
                    outcome = routes.apply_registration(run_steps(registration.plan_steps(req, routes)))
                elif action == 7:  # a plan made now, applied after the next change (stale)
                    if stale is not None:
                        outcome = routes.apply_registration(stale)
                    stale = run_steps(registration.plan_steps(request(rng, counter), routes))
                elif action == 8:
                    name = rng.choice(GROUPS)
                    broker_id = rng.choice([0, 1, 2])
                    routes.unregister_broker("c1", f"10.0.{GROUPS.index(name)}.{broker_id}:10911", name, broker_id)
                elif action == 9:
                    name = rng.choice(GROUPS)
                    routes.on_channel_destroy(f"10.0.{GROUPS.index(name)}.{rng.choice([0, 1, 2])}:10911")
                elif action == 10:
                    run.clock.advance(rng.choice([1, 40, 130]))
                    outcome = routes.scan_not_active_broker()
                elif action == 11:
                    outcome = (routes.wipe_write_perm_of_broker(rng.choice(GROUPS)) if rng.random() < 0.5
                               else routes.add_write_perm_of_broker(rng.choice(GROUPS)))
                elif action == 12 and kept:  # a renewal of one applied in full, by its digest
                    req = rng.choice(kept)
                    if req.digest is not None:
                        found = routes.renew((req.clusterName, req.brokerAddr, req.brokerName), req.brokerId,
                                             req.enableActingMaster, req.zoneName, req.channel, req.digest)
                        outcome = None if found is None else (found.haServerAddr, found.masterAddr)
                else:
                    run.clock.advance(rng.choice([0.5, 2]))
                if hasattr(outcome, "shown"):
                    outcome = outcome.shown
            except RegistrationRefused as refused:
                outcome = f"refused {refused}"
            routes.settle_now()
            lines = [f"op {counter} {action} {outcome!r}", *run.lines(list(logged))]
        hashed.append(hashlib.sha1("\n".join(lines).encode()).hexdigest())
        last = lines
    return hashed, last + run.metrics()


@pytest.mark.parametrize("seed", sorted(SEQUENCES))
def test_registrations_do_as_they_did_before_the_first_registrations_path_was_cut(seed, tmp_path, monkeypatch):
    monkeypatch.setattr(registration, "TOPICS_PER_STEP", 3)  # plans made in steps
    monkeypatch.setattr(registration, "ALIKE_AT_LEAST", 3)  # alike slices staged in C
    hashed, last = transcript(tmp_path, seed)
    recorded = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    if RECORD:
        recorded[str(seed)] = {"hashed": hashed, "last": last}
        RECORDED.write_text(json.dumps(recorded, indent=0, sort_keys=True) + "\n")
        return
    expected = recorded[str(seed)]
    differs = next((number for number, (ours, theirs) in enumerate(zip(hashed, expected["hashed"], strict=True), 1)
                    if ours != theirs), None)
    assert differs is None, f"operation {differs} of seed {seed} differs from the recording"
    assert last == expected["last"]
