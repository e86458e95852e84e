"""Which decoding task reassembles which connection: the costliest ones dealt out evenly.

A decoding task takes whole 4-tuples, and a few of them (brokers registering every 30 s for hours,
clients asking for routes all day) carry most of the work. Hashed to tasks, they made tasks of
very unequal length, and a core finished the stage alone (docs/benchmarks.md, "Figures behind
design choices"). So the reading tasks estimate what decoding each 4-tuple they found much of will cost, and the driver
deals them out, costliest first, each to the task with the least cost so far (the
longest-processing-time rule); the many small ones stay hashed.

Decoding costs per byte (bodies inflated and parsed) and per frame (a header parsed, a row made),
so a broker's connection costs a few times a client's with as many frames, not the ratio of their
bytes (FRAME_COST_BYTES is a frame's cost in bytes' worth). The reading tasks cannot count frames, but a
request-response protocol changes direction once a frame: the runs of payload-carrying segments
one way count them.

The tasks are not equal: per core one of two shares and one of one (task_shares), biggest first,
as Spark starts a stage's tasks in index order. A core that runs slower than the other (a busy
neighbour on a shared machine, the JVM's threads on it) then ends its big task late, and the other
core takes the small one it would have run: the stage ends nearer when the work does than when the
slower core's equal half does. Each task costs its Python worker and the JVM a fixed ~30 ms, so
two a core, not more: three (four, two and one shares) gave the 10 h capture's two-core run 15
Python tasks against one core's 4 (docs/benchmarks.md). Where the driver hands the pieces out
(a local master, job._ReadPieces), the tasks are one a core, each taking the next batch of the
hand-out nobody took when it is free (job.Claims): the batches then cost no Python task each, so
they are four, two and one shares a core (claimed_decoding), and the cores end at most the last
batch apart.

Spark's hash partitioning sends a row to pmod(murmur3(value, seed 42), partitions), the hash
its bucketed tables on disk rely on; a dealt 4-tuple gets a value that hashes to its task. Were
that ever to change, the tasks would be unbalanced again, never wrong: each 4-tuple still goes
to one task whole.
"""

from __future__ import annotations

import heapq
import json
import struct
from collections.abc import Collection, Iterable, Mapping

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

from spark_analysis.capture.inputs import ConnectionKey, Piece
from spark_analysis.capture.reassembly import SEGMENT

#: what decoding a frame costs, in what decoding that many payload bytes does
FRAME_COST_BYTES = 5600
#: a reading task counts a 4-tuple's cost when its piece costs this much (~50 frames)
COUNTED_COST = 1 << 18
#: 4-tuples dealt, at most (they go into the plan as one literal); the rest, each costing less
#: than any dealt one, hash evenly enough
MAX_DEALT = 1024
#: a costly 4-tuple is guessed a client's when its server sent it this many times what it was sent
#: (the synthetic capture's clients: 3.6-4.1x; the real captures' brokers: 0.0-0.75x)
CLIENT_RATIO = 2


def decode_cost(piece: Piece) -> int:
    """What decoding a piece costs, in payload bytes: its own, and a frame's worth per run of
    payload-carrying segments one way."""
    segments = np.frombuffer(piece.rows, SEGMENT)
    ways = segments["forward"][segments["length"] > 0]
    runs = int(np.count_nonzero(ways[1:] != ways[:-1])) + (len(ways) > 0)
    return int(segments["length"].sum()) + FRAME_COST_BYTES * runs


def sent_bytes(piece: Piece) -> tuple[int, int]:
    """The stream bytes a piece's segments carry from its lower end and from its higher end
    (those a snap length cut counted: what was sent, not what was kept)."""
    segments = np.frombuffer(piece.rows, SEGMENT)
    sent = segments["length"].astype(np.int64) + np.maximum(segments["missing"], 0)
    by_lower = int(sent[segments["forward"]].sum())
    return by_lower, int(sent.sum()) - by_lower


def guessed_clients(sent: Mapping[tuple[ConnectionKey, bool], int], sides: Mapping[ConnectionKey, str]
                    ) -> frozenset[ConnectionKey]:
    """The costly 4-tuples whose server end sent at least CLIENT_RATIO times what it was sent: a
    client's route lookups (answers carry the routes), never a broker's registrations (requests
    carry the tables). A guess from bytes alone: what decoding finds is the judge (job.py)."""
    found = []
    for (key, by_lower), count in sent.items():
        if not by_lower or key not in sides:
            continue
        lower, higher = count, sent.get((key, False), 0)
        to_server, to_client = (higher, lower) if sides[key] == key[0] else (lower, higher)
        if to_client >= CLIENT_RATIO * max(to_server, 1):
            found.append(key)
    return frozenset(found)


def decode_beside_replay(cores: int) -> bool:
    """Whether the guessed clients' 4-tuples are decoded beside the replay: only where a core would
    otherwise wait for it. With one core none does, and what the split costs stays: a second scan of
    the kept pieces, its shuffle and tasks, the union (on the 10 h capture, `local[1]` used 0.2-0.6 s
    less of the JVM's CPU without it; docs/benchmarks.md)."""
    return cores > 1


def among(keys: Collection[ConnectionKey]) -> Column:
    """Whether a piece's 4-tuple (columns ``lower`` and ``higher``) is one of ``keys``: one
    literal however many (as task_column)."""
    return F.expr(_looked_up(dict.fromkeys(keys, True), "boolean", "false"))


def task_shares(cores: int, at_least: int = 0) -> list[int]:
    """Each decoding task's share of the work, in task order: with one core two equal tasks, with
    more two shares and one per core, biggest first; ``at_least`` equal tasks where more are
    needed (remote captures, whose payloads the tasks hold: a bound on each task's memory)."""
    shares = [1, 1] if cores == 1 else [2] * cores + [1] * cores
    return shares if at_least <= len(shares) else [1] * at_least


def claimed_shares(cores: int) -> list[int]:
    """The shares of the batches a stage's tasks take for themselves (job.Claims), biggest first:
    four, two and one per core. A batch costs no Python task of its own there, only its part files
    and a tally (a few ms), so the last ones can be small: the core that takes the last batch ends
    at most that batch after the other, where a task a share ended up to a sixth of the work late."""
    return [4] * cores + [2] * cores + [1] * cores


def claimed_decoding(cores: int, at_least: int = 0) -> list[int]:
    """The shares of the decoding stage's batches where its tasks take them for themselves (job.Claims,
    a task a core: a local master, whose driver hands the pieces out): with one core one batch (no
    core to balance, and a batch costs its part files and a tally), with more as claimed_shares;
    ``at_least`` equal batches where more are needed (task_shares)."""
    shares = [1] if cores == 1 else claimed_shares(cores)
    return shares if at_least <= len(shares) else [1] * at_least


def deal(costs: Mapping[ConnectionKey, int], shares: list[int], hashed: int = 0) -> dict[ConnectionKey, int]:
    """The costliest 4-tuples, each with its task: costliest first, to the task furthest below
    its share of the whole. ``hashed`` is the cost of the 4-tuples no reading task counted: they,
    and the costliest beyond MAX_DEALT, hash evenly over the tasks."""
    costliest = sorted(costs.items(), key=lambda item: (-item[1], item[0]))[:MAX_DEALT]
    total = sum(costs.values()) + hashed
    evenly = (total - sum(cost for _, cost in costliest)) / len(shares)
    per_share = total / sum(shares)
    # (load - target, task): the top of the heap is the task furthest below its target
    loads = [(evenly - per_share * share, task) for task, share in enumerate(shares)]
    heapq.heapify(loads)
    dealt = {}
    for key, cost in costliest:
        below, task = heapq.heappop(loads)
        dealt[key] = task
        heapq.heappush(loads, (below + cost, task))
    return dealt


def task_column(dealt: Mapping[ConnectionKey, int], tasks: int) -> Column:
    """What to repartition the pieces by (``repartition(tasks, column)``): for a dealt 4-tuple a
    value that Spark's hash partitioning sends to its task, for any other the hash of its ends."""
    if not dealt:
        return F.expr(_ENDS_HASH)
    to_value = _values_to_tasks(tasks)
    return F.expr(_looked_up({key: to_value[task] for key, task in dealt.items()}, "int", _ENDS_HASH))


def _looked_up(values: Mapping[ConnectionKey, object], sql_type: str, otherwise: str) -> str:
    """A piece's value in ``values`` by its 4-tuple (of Spark SQL type ``sql_type``), else
    ``otherwise``, as Spark SQL: one literal however many (a map of literals costs a Py4J call and
    an expression each)."""
    known = json.dumps({f"{lower} {higher}": value for (lower, higher), value in values.items()})
    return f"coalesce(from_json({sql_string(known)}, 'map<string,{sql_type}>')[{_KEY}], {otherwise})"


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal (backslash escapes, Spark's default)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: a piece's 4-tuple as the deal's JSON keys name it, and its hash, in Spark SQL: an expression
#: given as text is one call to the JVM, where each function and column of pyspark's is one or more
#: (made between the Spark jobs, while every core waits: docs/spark-internals.md, step 3)
_KEY = "concat_ws(' ', lower, higher)"
_ENDS_HASH = "hash(lower, higher)"


def task_of(key: ConnectionKey, dealt: Mapping[ConnectionKey, int], tasks: int) -> int:
    """The task a 4-tuple's pieces go to, as ``repartition(tasks, task_column(dealt, tasks))``
    sends them: where a local master's driver hands the kept pieces out itself (job.py), each
    4-tuple goes to the task it would have been shuffled to."""
    if key in dealt:
        return dealt[key]
    return spark_hash_int(spark_hash_strings(key)) % tasks  # Python's % is Spark's pmod


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


def spark_hash_strings(texts: Iterable[str], seed: int = 42) -> int:
    """Spark's hash of string columns (``hash(a, b)``: each Murmur3_x86_32.hashUnsafeBytes of its
    UTF-8 bytes, seeded with the hash so far; the bytes past the last whole word mixed one signed
    byte at a time, as Spark's own, not the reference Murmur3), as a signed 32-bit int."""
    h = seed & _MASK
    for text in texts:
        data = text.encode()
        aligned = len(data) - len(data) % 4
        for word in struct.unpack_from(f"<{aligned // 4}i", data):
            h = _mix_h1(h, _mix_k1(word))
        for byte in struct.unpack_from(f"{len(data) - aligned}b", data, aligned):
            h = _mix_h1(h, _mix_k1(byte))
        h = _fmix(h, len(data))
    return h - (1 << 32) if h & 0x80000000 else h


def _mix_k1(k: int) -> int:
    return _rotl(k * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK


def _mix_h1(h: int, k: int) -> int:
    return (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h: int, length: int) -> int:
    h ^= length
    h = (h ^ h >> 16) * 0x85EBCA6B & _MASK
    h = (h ^ h >> 13) * 0xC2B2AE35 & _MASK
    return h ^ h >> 16


_MASK = 0xFFFFFFFF


def _rotl(x: int, bits: int) -> int:
    return (x << bits | x >> 32 - bits) & _MASK
