"""What every Python task of the job does first."""

from __future__ import annotations

import gc


def settle() -> None:
    """PySpark's daemon runs a full garbage collection after every task in a reused worker: over
    the objects of the modules a task imports (numpy, pyarrow, the codec), ~40 ms a task. Freezing
    what exists when a task starts (no garbage then: the collection just ran) takes them out of it."""
    gc.freeze()
