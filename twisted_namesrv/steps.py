"""Long work in steps: a generator that yields after each bounded slice of a job.

A NameServer must keep answering lookups while it decodes a broker's 12 MB topic table. Such
jobs are written as generators that ``yield`` between slices of about a millisecond; the service
runs them across reactor turns (dispatch.py, with Twisted's Cooperator) and everything else
runs them straight through with ``run_steps``. Pure Python: the codec and the state use it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

#: a job in steps whose result is a T
Steps = Generator[None, None, T]

#: how many bytes of a big body one step handles: decoding them takes about a millisecond
STEP_BYTES = 256 * 1024


def run_steps(steps: Steps[T]) -> T:
    """Every step at once; the job's result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]  # (typed so, a line fewer: a heartbeat's counted lines)
