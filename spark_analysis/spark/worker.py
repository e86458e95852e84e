"""What every Python task of the job does first, and the failure drill tests use. (The task that
starts a worker early is job.start_worker: a worker's first import is the job's modules.)"""

from __future__ import annotations

import gc

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
