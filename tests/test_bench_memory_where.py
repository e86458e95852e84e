"""memory_where.py tells where a server's memory goes: the objects reachable from the collector's
by type and holder, and which kinds grew between two such counts."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import memory_where  # noqa: E402  (tools/bench)


class Holder:
    __slots__ = ("table",)

    def __init__(self) -> None:
        self.table = {f"key-{i}": [i] for i in range(50)}


def test_a_census_counts_what_a_holder_keeps_by_its_type() -> None:
    before = memory_where.census()
    kept = [Holder() for _ in range(20)]
    after = memory_where.census()
    rows = {kind: (count, size) for kind, count, size in memory_where.grown(before, after, 1000)}
    assert rows["Holder"][0] == 20
    assert rows["dict in Holder"][0] == 20 and rows["dict in Holder"][1] >= 20 * sys.getsizeof(kept[0].table)
    assert rows["list in dict in Holder"][0] == 20 * 50  # each table's lists, named by what holds them
    assert rows["str in dict in Holder"][0] == 20 * 50


def test_what_grew_most_comes_first_and_what_went_counts_less() -> None:
    before = [("dict in A", 10, 1000), ("str in B", 5, 300), ("C", 2, 100)]
    after = [("dict in A", 12, 1400), ("str in B", 1, 60), ("C", 2, 100), ("D", 3, 900)]
    assert memory_where.grown(before, after, 3) == [("D", 3, 900), ("dict in A", 2, 400), ("C", 0, 0)]
