"""What every Python task of the job does first, and the failure drill tests use. (The task that
starts a worker early is job.start_worker: a worker's first import is the job's modules.)"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import TaskContext

#: a Spark local property naming stages ("read", "decode", "liveness") whose even-numbered tasks
#: fail on their first attempt, after sending some output: how tests prove the counts exact
FAIL_FIRST_ATTEMPT = "spark_analysis.fail_first_attempt"


def settle() -> None:
    """PySpark's daemon runs a full garbage collection after every task in a reused worker: over
    the objects of the modules a task imports (numpy, pyarrow, the codec), every task. Freezing
    what exists when a task starts (no garbage then: the collection just ran) takes them out of it."""
    gc.freeze()


def drill(stage: str) -> None:
    """Fail this task's first attempt if a test asked so (FAIL_FIRST_ATTEMPT) for this stage."""
    context = TaskContext.get()
    asked = context.getLocalProperty(FAIL_FIRST_ATTEMPT) or ""
    if stage in asked.split(",") and context.attemptNumber() == 0 and context.partitionId() % 2 == 0:
        raise RuntimeError(f"{stage}: first attempt of task {context.partitionId()} failed on purpose ({asked})")


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """A task's own objects, made by the million and hardly any in cycles, kept out of the cycle
    collector's walks while it runs (PySpark's daemon collects after the task): decoding, a third
    of its time (re-enabled between connections, a tenth); the liveness task's events, stays and
    rows, a quarter of its (the one task after decoding, which the other cores wait for). The
    driver's run too (job.analyse), whose steps between and after the jobs every core waits for."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
