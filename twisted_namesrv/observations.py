"""What the status page, ``/api`` and ``/metrics`` read beside the state: what the server observed
of itself, each piece with its one owner, constructed once by the composition root (service.py:
``build``) and handed to the web side here, in one value."""

from __future__ import annotations

from dataclasses import dataclass

from .audit import AuditTrail
from .departures import DepartedBrokers
from .events import RecentEvents
from .flapping import FlapWatch
from .lost_topics import LostTopics
from .metrics import Metrics
from .outages import HealthWatch
from .stalls import StallWatch


@dataclass(frozen=True)
class Observations:
    """The counters (``metrics``), the page's recent events, the brokers and the topics that left
    lately, the audit trail (its counts), the outages worked out from the routes and the
    remembered topology (``health``: one computation for the page, /api, /metrics and /readyz), the
    brokers flapping (``flaps``), and the times the server itself did not run (``stalls``)."""

    metrics: Metrics
    events: RecentEvents
    departed: DepartedBrokers
    lost: LostTopics
    audit: AuditTrail
    health: HealthWatch
    flaps: FlapWatch
    stalls: StallWatch
