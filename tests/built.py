"""Tests build a NameServer's pieces through the composition root (service.build), as the server
does: every owner once, every subscription wired; these helpers add what a test wants around it."""

from __future__ import annotations

from typing import Any

from twisted_namesrv.dispatch import Dispatcher
from twisted_namesrv.server import RemotingFactory
from twisted_namesrv.service import Owners, build
from twisted_namesrv.state.config import NamesrvConfig


def dispatcher(config: NamesrvConfig, clock: Any, keep_answers: bool = True, cls: type[Dispatcher] = Dispatcher,
               **options: Any) -> Dispatcher:
    """A dispatcher on owners built by the root (``options``: Dispatcher's, such as count_requests)."""
    owners = build(config, clock, keep_answers=keep_answers)
    return cls(owners.state, owners.seen.metrics, **options)


def factory(dispatcher: Dispatcher, clock: Any, max_frame_length: int, idle_timeout: float,
            **options: Any) -> RemotingFactory:
    """A listener's factory sharing the dispatcher's state's refusals and memory budget, as the server's does."""
    state = dispatcher.state
    return RemotingFactory(dispatcher, clock, max_frame_length, idle_timeout, state.refusals, state.budget, **options)


def owners(config: NamesrvConfig, clock: Any, **options: Any) -> Owners:
    return build(config, clock, **options)
