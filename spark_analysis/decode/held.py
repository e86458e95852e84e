"""What the NameServer itself holds for a broker after each of its registrations.

A broker's registration does not always carry its whole topic table: a 4.9.8 broker registers a
topic just created alone (registerIncrementBrokerData), and a 5.x broker announces a new topic
with a registration carrying only that topic. The NameServer adds such topics to those it holds;
it drops none. Rather than guess which body is a whole table, the registrations of a connection
are replayed through the server's own registration logic (``state.routes.RouteInfoManager``, of
the generation the broker speaks, with the capture's time as its clock) and the topics it then
holds for the broker's name are counted.

One replay per connection: a broker registers over one connection, and when that connection
closes the NameServer forgets the broker (onChannelDestroy), so a broker's next connection starts
from nothing there too. Pure Python: the decoding tasks run it per connection, tests directly.
"""

from __future__ import annotations

from typing import Any

from twisted_namesrv.bodies.register import RegisterBrokerBody
from twisted_namesrv.bodies.register_header import RegisterBrokerHeader
from twisted_namesrv.remoting.codes import V5_0_0
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.routes import RegisterRequest, RouteInfoManager

MASTER_ID = 0


def generation_of(version: int) -> str:
    """The NameServer generation whose rules apply to a broker speaking this MQVersion."""
    return "5.3.3" if version >= V5_0_0 else "4.9.8"


class HeldTopics:
    """One connection's registrations and goodbyes, replayed as the NameServer applies them."""

    def __init__(self) -> None:
        self._now = 0.0
        self._managers: dict[str, RouteInfoManager] = {}
        #: broker name -> (the manager's generation when counted, the count): a re-registration
        #: of an unchanged table changes nothing, and counting walks every topic
        self._counted: dict[tuple[str, str], tuple[int, int]] = {}
        self._last: dict[str, tuple[Any, ...]] = {}  # broker address -> the last registration replayed

    def _manager(self, generation: str) -> RouteInfoManager:
        manager = self._managers.get(generation)
        if manager is None:
            manager = self._managers[generation] = RouteInfoManager(
                NamesrvConfig({"compatVersion": generation}), lambda: self._now)
        return manager

    def register(self, ts: float, header: RegisterBrokerHeader, body: RegisterBrokerBody | None,
                 body_key: bytes | None, version: int) -> int | None:
        """Apply an accepted registration (its header read once, by the caller); the topics the
        server then holds for the broker's name, or None where it holds none from this broker (a
        slave's table is not applied) or the registration cannot be applied (no body, no name,
        address or id)."""
        cluster, addr, name, broker_id = header.clusterName, header.brokerAddr, header.brokerName, header.brokerId
        if body is None or cluster is None or addr is None or name is None or broker_id is None:
            return None
        generation = generation_of(version)
        manager = self._manager(generation)
        self._now = ts
        key = (generation, cluster, name, broker_id, header.haServerAddr, header.enableActingMasterText,
               header.zoneName, body_key)
        if self._last.get(addr) != key:  # the same table again: the server's tables stay as they are
            result = manager.register_broker(RegisterRequest(
                clusterName=cluster, brokerAddr=addr, brokerName=name, brokerId=broker_id,
                haServerAddr=header.haServerAddr, body=body, channel=addr, zoneName=header.zoneName,
                enableActingMaster=header.enableActingMaster, version=version))
            if result is None:
                self._last.pop(addr, None)
                return None
            self._last[addr] = key
        held = self._count(generation, manager, name)
        return held if held or broker_id == MASTER_ID else None

    def unregister(self, ts: float, header: RegisterBrokerHeader, version: int) -> None:
        """UNREGISTER_BROKER: the server forgets the broker (and its group's topics if it was the
        last). Its header names the broker with REGISTER_BROKER's fields, read by the same rules."""
        self._now = ts
        manager = self._manager(generation_of(version))
        manager.unregister_broker(header.clusterName, header.brokerAddr, header.brokerName, header.brokerId)
        self._last.pop(header.brokerAddr or "", None)

    def _count(self, generation: str, manager: RouteInfoManager, name: str) -> int:
        counted = self._counted.get((generation, name))
        if counted is not None and counted[0] == manager.generation:
            return counted[1]
        held = sum(1 for queues in manager.topicQueueTable.values() if name in queues)
        self._counted[(generation, name)] = (manager.generation, held)
        return held
