"""BrokerHeartbeatManager: which brokers are alive, as Java's DefaultBrokerHeartbeatManager.

Pure: the clock is injected (milliseconds), and what the caller must do (close a channel, react
to an inactive broker) is returned rather than done.  A broker is alive while its last heartbeat
(904) is younger than the timeout it announced; its controller connection closing ends it at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ..state.config import KEYS_BY_NAME
from .codes import CONTROLLER_HEARTBEAT_TIMEOUT_MS
from .replicas import MAX_TEXT_LENGTH

JAVA_INT_MAX = (1 << 31) - 1
#: brokers the live table holds at once (the NameServer's maxBrokers default): a heartbeat keeps a
#: broker for the timeout it announces, and a closed channel ends one, so without a bound one peer
#: could fill memory with ghosts (20,000 of them: 10.5 MB and as many log lines)
MAX_LIVE_BROKERS: int = KEYS_BY_NAME["maxBrokers"].default


@dataclass(frozen=True, slots=True)
class BrokerIdentityInfo:
    cluster_name: str
    broker_name: str
    broker_id: int


@dataclass
class BrokerLiveInfo:
    broker_name: str
    broker_addr: str
    broker_id: int
    last_update_timestamp: int
    heartbeat_timeout_millis: int
    channel: Hashable | None
    epoch: int
    max_offset: int
    election_priority: int
    confirm_offset: int = -1


class BrokerHeartbeatManager:
    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self.clock_ms = clock_ms
        self.broker_live_table: dict[BrokerIdentityInfo, BrokerLiveInfo] = {}

    def limit_refusal(self, cluster_name: str, broker_name: str, broker_addr: str,
                      broker_id: int) -> tuple[str, str] | None:
        """(reason, why) when a heartbeat of a broker not alive yet would pass a limit of the live
        table (MAX_LIVE_BROKERS, MAX_TEXT_LENGTH), else None: one alive always beats."""
        if BrokerIdentityInfo(cluster_name, broker_name, broker_id) in self.broker_live_table:
            return None
        for text in (cluster_name, broker_name, broker_addr):
            if len(text) > MAX_TEXT_LENGTH:
                return "max_name_length", f"a field of {len(text)} characters, over {MAX_TEXT_LENGTH}"
        if len(self.broker_live_table) >= MAX_LIVE_BROKERS:
            return "max_brokers", f"{len(self.broker_live_table)} brokers are alive: at most {MAX_LIVE_BROKERS}"
        return None

    def on_broker_heartbeat(self, cluster_name: str, broker_name: str, broker_addr: str, broker_id: int,
                            timeout_millis: int | None, channel: Hashable | None, epoch: int | None,
                            max_offset: int | None, confirm_offset: int | None,
                            election_priority: int | None) -> bool:
        """Record a heartbeat; True when this broker was not known alive before."""
        identity = BrokerIdentityInfo(cluster_name, broker_name, broker_id)
        prev = self.broker_live_table.get(identity)
        real_epoch = -1 if epoch is None else epoch
        real_offset = -1 if max_offset is None else max_offset
        real_confirm = -1 if confirm_offset is None else confirm_offset
        real_timeout = CONTROLLER_HEARTBEAT_TIMEOUT_MS if timeout_millis is None else timeout_millis
        real_priority = JAVA_INT_MAX if election_priority is None else election_priority
        now = self.clock_ms()
        if prev is None:
            self.broker_live_table[identity] = BrokerLiveInfo(broker_name, broker_addr, broker_id, now, real_timeout,
                                                              channel, real_epoch, real_offset, real_priority,
                                                              real_confirm)
            return True
        prev.last_update_timestamp = now
        prev.heartbeat_timeout_millis = real_timeout
        prev.election_priority = real_priority
        if real_epoch > prev.epoch or (real_epoch == prev.epoch and real_offset > prev.max_offset):
            prev.epoch, prev.max_offset, prev.confirm_offset = real_epoch, real_offset, real_confirm
        return False

    def on_broker_channel_close(self, channel: Hashable) -> BrokerIdentityInfo | None:
        """The broker whose heartbeats came over ``channel`` is gone (Java: the first one found)."""
        for identity, info in self.broker_live_table.items():
            if info.channel == channel:
                del self.broker_live_table[identity]
                return identity
        return None

    def scan_not_active_broker(self) -> list[tuple[BrokerIdentityInfo, BrokerLiveInfo]]:
        """Remove and return the brokers whose heartbeat timed out (the caller closes their channels)."""
        now = self.clock_ms()
        expired = [(k, v) for k, v in self.broker_live_table.items()
                   if now - v.last_update_timestamp > v.heartbeat_timeout_millis]
        for identity, _ in expired:
            del self.broker_live_table[identity]
        return expired

    def get_broker_live_info(self, cluster_name: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self.broker_live_table.get(BrokerIdentityInfo(cluster_name, broker_name, broker_id))

    def is_broker_active(self, cluster_name: str, broker_name: str, broker_id: int) -> bool:
        info = self.broker_live_table.get(BrokerIdentityInfo(cluster_name, broker_name, broker_id))
        return info is not None and info.last_update_timestamp + info.heartbeat_timeout_millis >= self.clock_ms()

    def get_active_brokers_num(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for k in self.broker_live_table:
            if self.is_broker_active(k.cluster_name, k.broker_name, k.broker_id):
                group = counts.setdefault(k.cluster_name, {})
                group[k.broker_name] = group.get(k.broker_name, 0) + 1
        return counts
