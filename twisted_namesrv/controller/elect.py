"""DefaultElectPolicy: who becomes master, as Java's elect/impl/DefaultElectPolicy.

Candidates are the alive members of the sync-state set, then (``enableElectUncleanMaster``)
every alive member.  The old master stays if it is alive and nobody is designated; a designated
broker wins if it is a candidate; otherwise the best by (epoch desc, max offset desc, election
priority asc) from the brokers' last heartbeats."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..remoting.fastjson import java_hash_order
from .heartbeat import BrokerLiveInfo
from .replicas import BrokerValidPredicate, ElectPolicy

BrokerLiveInfoGetter = Callable[[str, str, int], BrokerLiveInfo | None]


@dataclass
class Election:
    """The last decision, for the election log and the status page: who and from whom."""

    candidates: list[int] = field(default_factory=list)
    chosen: int | None = None
    why: str = ""


class DefaultElectPolicy(ElectPolicy):
    def __init__(self, valid: BrokerValidPredicate | None = None,
                 live_info: BrokerLiveInfoGetter | None = None) -> None:
        self.valid = valid
        self.live_info = live_info
        self.last = Election()

    def elect(self, cluster_name: str, broker_name: str, sync_state_brokers: set[int] | None,
              all_replica_brokers: set[int] | None, old_master: int | None,
              prefer_broker_id: int | None) -> int | None:
        self.last = Election()
        new_master = None
        if sync_state_brokers is not None:
            new_master = self._try_elect(cluster_name, broker_name, sync_state_brokers, old_master, prefer_broker_id,
                                         "sync-state set")
        if new_master is None and all_replica_brokers is not None:
            new_master = self._try_elect(cluster_name, broker_name, all_replica_brokers, old_master,
                                         prefer_broker_id, "all replicas (enableElectUncleanMaster)")
        return new_master

    def _try_elect(self, cluster_name: str, broker_name: str, brokers: set[int], old_master: int | None,
                   prefer: int | None, among: str) -> int | None:
        candidates = list(java_hash_order(sorted(brokers)))  # Java's stream over a HashSet
        if self.valid is not None:
            candidates = [b for b in candidates if self.valid(cluster_name, broker_name, b)]
        self.last = Election(candidates, None, f"no alive candidate in the {among}")
        if not candidates:
            return None
        if old_master in candidates and (prefer is None or prefer == old_master):
            return self._chose(old_master, "the old master is alive")
        if prefer is not None:
            if prefer in candidates:
                return self._chose(prefer, f"designated, alive in the {among}")
            self.last.why = f"designated broker {prefer} is not an alive member of the {among}"
            return None
        if self.live_info is not None:
            infos = [(b, self.live_info(cluster_name, broker_name, b)) for b in candidates]
            known = [(b, i) for b, i in infos if i is not None]
            if known:
                best = min(known, key=lambda pair: (-pair[1].epoch, -pair[1].max_offset, pair[1].election_priority))
                return self._chose(best[0], f"best (epoch, maxOffset, electionPriority) in the {among}")
        return self._chose(candidates[0], f"first alive in the {among}")

    def _chose(self, broker_id: int | None, why: str) -> int | None:
        self.last.chosen, self.last.why = broker_id, why
        return broker_id
