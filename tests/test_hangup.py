"""hangup.stop_on_hangup: SIGHUP stops the reactor only where the reactor itself handles SIGTERM."""

from __future__ import annotations

import signal

import pytest

from twisted_namesrv.hangup import stop_on_hangup


class _Reactor:
    def sigTerm(self, number: int, frame: object = None) -> None:  # noqa: N802 - Twisted's name
        pass


@pytest.fixture
def handlers():
    saved = signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, saved[0])
    signal.signal(signal.SIGTERM, saved[1])


def test_sighup_stops_a_reactor_that_handles_sigterm(handlers):
    reactor = _Reactor()
    signal.signal(signal.SIGTERM, reactor.sigTerm)
    assert stop_on_hangup(reactor) and signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, signal.SIG_IGN)


def test_a_sigterm_handler_of_the_embedding_program_is_not_the_reactors(handlers):
    """A program that runs the reactor without its signal handlers and handles SIGTERM itself:
    SIGHUP is its business, not a stop of the reactor behind its back."""
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    assert not stop_on_hangup(_Reactor()) and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
