"""Where the controller's events are kept, and who may write them: the seam between the controller's
state and the store that makes it durable (a local file by default, etcd for several peers).

The controller changes its state only through events; an event is answered only once ``append`` has
made it durable, and a controller rebuilds its state from ``replay`` at start and whenever it becomes
leader (a shared store refuses appends built on a view older than the log). Only the leader writes:
a store shared by peers refuses the others' appends with ``NotLeader``, so two controllers can never
both hand out a broker id or an epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.defer import Deferred


class NotLeader(Exception):
    """This controller may not write: another holds the leadership (its address, or None when no
    leader is known right now). The request must not be answered as done; what the store holds is
    the truth, which the next leader (maybe this controller again) gets from ``replay``. (A refused
    append landed nothing; one whose answer from the store was lost may have, and its controller
    then steps down so that a replay settles it.)"""

    def __init__(self, leader_address: str | None) -> None:
        super().__init__(f"not the controller leader (leader: {leader_address or 'unknown'})")
        self.leader_address = leader_address


class ControllerLog(Protocol):
    """The controller's events, durable and in order."""

    def replay(self) -> Deferred[list[bytes]]:
        """Every committed event, oldest first (at start, and on becoming leader)."""
        ...

    def append(self, events: list[bytes]) -> Deferred[None]:
        """Make ``events`` durable, all or none; fires once they are. Errbacks ``NotLeader`` when this
        controller is not (or no longer) the leader."""
        ...


class Leadership(Protocol):
    """Which controller is the leader, as this one knows it."""

    is_leader: bool
    #: the leader controller's remoting address "host:port", or None while none is known
    leader_address: str | None

    def subscribe(self, callback: Callable[[bool, str | None], None]) -> None:
        """Call ``callback(is_leader, leader_address)`` on every change of either."""
        ...
