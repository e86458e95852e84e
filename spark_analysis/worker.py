"""What every Python task of the job does first, the task that starts a worker early, and the
failure drill tests use."""

from __future__ import annotations

import gc
from collections.abc import Iterable

from pyspark import TaskContext

#: a Spark local property naming stages ("read", "decode", "liveness") whose even-numbered tasks
#: fail on their first attempt, after sending some output: how tests prove the counts exact
FAIL_FIRST_ATTEMPT = "spark_analysis.fail_first_attempt"


def settle() -> None:
    """PySpark's daemon runs a full garbage collection after every task in a reused worker: over
    the objects of the modules a task imports (numpy, pyarrow, the codec), every task. Freezing
    what exists when a task starts (no garbage then: the collection just ran) takes them out of it."""
    gc.freeze()


def start(_: Iterable) -> None:
    """A task that only starts its Python worker, with the modules of the job's tasks imported
    (session.start_workers)."""
    import spark_analysis.job  # noqa: F401 - the worker keeps them for the job's tasks


def drill(stage: str) -> None:
    """Fail this task's first attempt if a test asked so (FAIL_FIRST_ATTEMPT) for this stage."""
    context = TaskContext.get()
    asked = context.getLocalProperty(FAIL_FIRST_ATTEMPT) or ""
    if stage in asked.split(",") and context.attemptNumber() == 0 and context.partitionId() % 2 == 0:
        raise RuntimeError(f"{stage}: first attempt of task {context.partitionId()} failed on purpose ({asked})")
