"""Costly (state/costly.py): what is costly to make is made again only once KEEP_FACTOR times its
cost has passed, so a loop of asks takes at most a fifth of the asking thread; what is cheap is
made for every ask."""

from __future__ import annotations

from twisted_namesrv.state.costly import KEEP_FACTOR, KEEP_FROM, KEEP_MAX, Costly


class Timers:
    """A monotonic clock and a CPU timer; ``make`` spends ``cost`` seconds of both."""

    def __init__(self, cost: float) -> None:
        self.now = self.cpu = 0.0
        self.cost = cost
        self.made = 0

    def make(self) -> int:
        self.now += self.cost
        self.cpu += self.cost
        self.made += 1
        return self.made


def costly(timers: Timers) -> Costly[int]:
    return Costly(timers.make, clock=lambda: timers.now, cost=lambda: timers.cpu)


def test_what_costs_a_second_is_kept_four_seconds() -> None:
    timers = Timers(1.0)
    kept = costly(timers)
    assert kept.get() == 1
    timers.now += KEEP_FACTOR - 0.01
    assert kept.get() == 1 and kept.made == 1
    timers.now += 0.01
    assert kept.get() == 2 and kept.made == 2


def test_asked_in_a_loop_the_making_takes_at_most_a_fifth() -> None:
    timers = Timers(0.5)
    kept = costly(timers)
    for _ in range(100_000):
        kept.get()
        timers.now += 0.001  # each ask answered in a millisecond
    assert timers.cpu / timers.now <= 1 / (1 + KEEP_FACTOR) + 0.01


def test_what_is_cheap_is_made_for_every_ask() -> None:
    timers = Timers(KEEP_FROM / 2)
    kept = costly(timers)
    assert [kept.get() for _ in range(3)] == [1, 2, 3]


def test_never_kept_longer_than_keep_max_and_forgotten_on_demand() -> None:
    timers = Timers(KEEP_MAX)  # would be kept four times that
    kept = costly(timers)
    kept.get()
    timers.now += KEEP_MAX
    assert kept.get() == 2
    kept.forget()
    assert kept.get() == 3
