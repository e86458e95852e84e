"""Fixtures of the interop suite: where the real clients are, and a record of every request
our NameServer answers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from twisted_namesrv.dispatch import Dispatcher
from twisted_namesrv.remoting import RemotingCommand

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def clients_dir() -> Path:
    """NAMESRV_CLIENTS_DIR, or <repo>/.clients where tools/install_clients.sh puts them."""
    return Path(os.environ.get("NAMESRV_CLIENTS_DIR") or REPO / ".clients").resolve()


@dataclass
class Exchange:
    """One request our NameServer dispatched, the connection it came over, and its answer."""

    peer: str
    request: RemotingCommand
    response: RemotingCommand | None


@pytest.fixture
def namesrv_exchanges(monkeypatch) -> list[Exchange]:
    """Every request our server answers by dispatch during the test, with its answer (None for a
    oneway request): every Dispatcher made during the test has an observer recording them (lookups
    answered from memory are not dispatched, so not recorded)."""
    exchanges: list[Exchange] = []
    real_init = Dispatcher.__init__

    def observed_init(dispatcher, *args, **kwargs):
        real_init(dispatcher, *args, **kwargs)
        dispatcher.observe(lambda request, peer, response: exchanges.append(
            Exchange(peer.address, request, None if request.is_oneway else response)))

    monkeypatch.setattr(Dispatcher, "__init__", observed_init)
    return exchanges
