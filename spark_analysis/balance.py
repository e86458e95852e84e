"""Which decoding task reassembles which connection: the largest ones dealt out evenly.

A decoding task takes whole 4-tuples, and a few of them (brokers registering every 30 s for hours)
carry most bytes. Hashed to tasks, they made tasks of 0.8 to 3.1 s from a 3.6 GB capture, and a
core finished the stage alone for up to 0.65 s. So the reading tasks count the payload bytes of
every 4-tuple they found much of, and the driver deals the largest out first, each to the task
with the fewest bytes so far (the longest-processing-time rule); the many small ones stay hashed.

Spark's hash partitioning sends a row to pmod(murmur3(value, seed 42), partitions), the hash
its bucketed tables on disk rely on; a dealt 4-tuple gets a value that hashes to its task. Were
that ever to change, the tasks would be unbalanced again, never wrong: each 4-tuple still goes
to one task whole.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from spark_analysis.inputs import ConnectionKey

#: a reading task counts a 4-tuple's bytes when it found this many of them
COUNTED_PIECE_BYTES = 1 << 20
#: 4-tuples dealt per decoding task, at most: the largest carry the imbalance; the rest hash evenly
DEALT_PER_TASK = 8


def deal(sizes: Mapping[ConnectionKey, int], tasks: int) -> dict[ConnectionKey, int]:
    """The largest 4-tuples, each with its task: largest first, to the least loaded task."""
    largest = sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:DEALT_PER_TASK * tasks]
    loads = [(0, task) for task in range(tasks)]
    dealt = {}
    for key, size in largest:
        load, task = heapq.heappop(loads)
        dealt[key] = task
        heapq.heappush(loads, (load + size, task))
    return dealt


def task_column(dealt: Mapping[ConnectionKey, int], tasks: int) -> Column:
    """What to repartition the pieces by (``repartition(tasks, column)``): for a dealt 4-tuple a
    value that Spark's hash partitioning sends to its task, for any other the hash of its ends."""
    ends_hash = F.hash("lower", "higher")
    if not dealt:
        return ends_hash
    to_value = _values_to_tasks(tasks)
    # one literal however many are dealt (a map of literals costs a Py4J call and an expression each)
    values = json.dumps({f"{lower} {higher}": to_value[task] for (lower, higher), task in dealt.items()})
    return F.coalesce(F.from_json(F.lit(values), "map<string,int>")[F.concat_ws(" ", "lower", "higher")],
                      ends_hash)


def _values_to_tasks(tasks: int) -> list[int]:
    """For each task, the least non-negative int that Spark's hash partitioning sends there."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < tasks:
        found.setdefault(spark_hash_int(value) % tasks, value)  # Python's % is Spark's pmod
        value += 1
    return [found[task] for task in range(tasks)]


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's hash of an int column (Murmur3_x86_32.hashInt), as a signed 32-bit int."""
    k = _rotl(value * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h = (_rotl(seed ^ k, 13) * 5 + 0xE6546B64) & _MASK
    h ^= 4  # the length in bytes
    h = (h ^ h >> 16) * 0x85EBCA6B & _MASK
    h = (h ^ h >> 13) * 0xC2B2AE35 & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


_MASK = 0xFFFFFFFF


def _rotl(x: int, bits: int) -> int:
    return (x << bits | x >> 32 - bits) & _MASK
