"""Costly (state/costly.py): what is costly to make is made again only once KEEP_FACTOR times its
cost has passed, so a loop of asks takes at most a fifth of the asking thread; what is cheap is
made for every ask."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import time
from types import ModuleType

import twisted_namesrv.state
from twisted_namesrv.state.costly import KEEP_FACTOR, KEEP_FROM, KEEP_MAX, Costly, KeepTimers


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
    return Costly(timers.make, KeepTimers(clock=lambda: timers.now, cost=lambda: timers.cpu))


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


PURE_LAYERS = ("twisted_namesrv.state", "twisted_namesrv.outages", "twisted_namesrv.events",
               "twisted_namesrv.departures", "twisted_namesrv.lost_topics", "twisted_namesrv.flapping")
REAL_CLOCKS = {time.time, time.monotonic, time.thread_time, time.perf_counter, time.process_time,
               time.time_ns, time.monotonic_ns, time.thread_time_ns, time.perf_counter_ns}


def pure_modules() -> list[ModuleType]:
    names = [name for name in PURE_LAYERS if name != "twisted_namesrv.state"]
    names += [info.name for info in pkgutil.iter_modules(twisted_namesrv.state.__path__, "twisted_namesrv.state.")]
    return [importlib.import_module(name) for name in names]


def test_no_pure_layer_defaults_to_a_real_clock() -> None:
    """The house rule: the pure layers' clocks are injected by the composition root (service.py:
    ``build``), so a test's fake clock reaches every one; a parameter defaulting to a real clock is
    one a caller may forget, and then that owner alone runs on the machine's time."""
    defaulted = []
    for module in pure_modules():
        for owner_name, owner in vars(module).items():
            if getattr(owner, "__module__", None) != module.__name__:
                continue
            functions = [(owner_name, owner)] if inspect.isfunction(owner) else []
            if inspect.isclass(owner):
                functions = [(f"{owner_name}.{name}", inspect.unwrap(function))
                             for name, function in vars(owner).items()
                             if inspect.isfunction(inspect.unwrap(getattr(function, "__func__", function)))]
                functions = [(name, getattr(function, "__func__", function)) for name, function in functions]
            for name, function in functions:
                for parameter in inspect.signature(function).parameters.values():
                    if any(parameter.default is clock for clock in REAL_CLOCKS):
                        defaulted.append(f"{module.__name__}.{name}({parameter.name}=...)")
    assert defaulted == [], defaulted

