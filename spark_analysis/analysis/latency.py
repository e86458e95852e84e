"""The report's request mix and latency percentiles per code and NameServer, counted by the
decoding tasks.

Each task counts its calls per code name and their latencies in logarithmic buckets 1% wide, as
a Counter in the tally row it returns (job.py), which the driver adds up: it gets a few hundred
numbers per code however many calls a capture holds, and no job reads calls/ back. A percentile is the
upper edge of the bucket it falls in, so within 1% of the exact value (latencies up to
MIN_LATENCY_MS share the first bucket).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PERCENTILES = (0.5, 0.9, 0.99)
MIN_LATENCY_MS = 1e-3
_GROWTH = 1.01  # each bucket's upper edge over the one before
_LOG_GROWTH = math.log(_GROWTH)
_REQUESTS = -1  # the bucket key under which a code's requests are counted
_CUT = -2  # ... and those whose answer a snap length left unknown (its opaque not captured)


class CodeStats(NamedTuple):
    code_name: str
    requests: int
    answered: int
    p: tuple[float, ...] | None  # latency percentiles in ms (PERCENTILES), None if none answered
    server: str | None = None  # the NameServer (None: all of them)
    #: not answered as far as known because a snap length cut the opaque that pairs them: answered
    #: or not, no one can tell (never counted unanswered, and no latency)
    cut: int = 0


def count_calls(calls: pa.StructArray) -> Counter[Any]:
    """(server, code_name, bucket) -> calls of a batch of schema.CALL_ROWS: every call under
    bucket -1, answered ones under their latency's bucket too. Latency is a server's: each
    NameServer is counted apart."""
    servers = pc.fill_null(calls.field("server"), "?") if calls.type.get_field_index("server") >= 0 else (
        pa.array(["?"] * len(calls), pa.string()))
    names = pc.binary_join_element_wise(servers, calls.field("code_name"), "\x00").dictionary_encode()
    dictionary = [tuple(name.split("\x00", 1)) for name in names.dictionary.to_pylist()]
    codes = names.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    latency = calls.field("latency_ms").to_numpy(zero_copy_only=False)  # NaN: unanswered
    answered = ~np.isnan(latency)
    tally: Counter[Any] = Counter()
    for code, count in _counted(codes):
        server, name = dictionary[code]
        tally[server, name, _REQUESTS] += count
    if calls.type.get_field_index("cut") >= 0:
        cut = pc.fill_null(calls.field("cut"), False).to_numpy(zero_copy_only=False) & ~answered
        for code, count in _counted(codes[cut]):
            server, name = dictionary[code]
            tally[server, name, _CUT] += count
    for key, count in _counted(codes[answered] << 32 | bucket_of(latency[answered])):
        server, name = dictionary[key >> 32]
        tally[server, name, key & 0xFFFFFFFF] += count
    return tally


def _counted(values: np.ndarray) -> zip[Any]:
    """(value, how often) for each distinct value."""
    return zip(*(column.tolist() for column in np.unique(values, return_counts=True)), strict=True)


def bucket_of(latency_ms: np.ndarray) -> np.ndarray:
    """The bucket of each latency: 0 up to MIN_LATENCY_MS, then one per 1% more."""
    ratio = np.maximum(latency_ms / MIN_LATENCY_MS, 1.0)
    return np.ceil(np.log(ratio) / _LOG_GROWTH - 1e-9).astype(np.int64)


def upper_edge(bucket: int) -> float:
    return MIN_LATENCY_MS * _GROWTH**bucket


def code_stats(tally: Counter[Any], by_server: bool = False) -> list[CodeStats]:
    """Per code name (and NameServer if ``by_server``): its requests, the answered ones and their
    latency percentiles."""
    by_code: dict[tuple[str | None, str], Counter[Any]] = {}
    for (server, name, bucket), count in tally.items():
        by_code.setdefault((server if by_server else None, name), Counter())[bucket] += count
    stats = []
    for (server, name), buckets in sorted(by_code.items(), key=lambda item: (item[0][1], item[0][0] or "")):
        requests, cut = buckets.pop(_REQUESTS, 0), buckets.pop(_CUT, 0)
        answered = sum(buckets.values())
        stats.append(CodeStats(name, requests, answered, _percentiles(buckets, answered) if answered else None,
                               server, cut))
    return stats


def _percentiles(buckets: dict[int, int], answered: int) -> tuple[float, ...]:
    """The smallest bucket edge with at least that share of the latencies at or below it."""
    found = []
    ordered = sorted(buckets.items())
    for percentile in PERCENTILES:
        seen = 0
        for bucket, count in ordered:
            seen += count
            if seen >= percentile * answered:
                found.append(upper_edge(bucket))
                break
    return tuple(found)
