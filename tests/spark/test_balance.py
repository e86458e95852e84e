"""Dealing the costliest 4-tuples out to the decoding tasks (balance.py)."""

from __future__ import annotations

import numpy as np
from pyspark.sql import functions as F

from spark_analysis import balance
from spark_analysis.capture.reassembly import SEGMENT
from spark_analysis.inputs import Piece


def _ends(index: int) -> tuple[str, str]:
    return ("10.0.0.1:9876", f"10.1.0.{index}:40000")


def test_decode_cost_counts_payload_bytes_and_a_frame_per_run_one_way() -> None:
    # a request in two segments with the server's bare ACK between them (no payload: no run), its
    # answer, the next request
    rows = np.zeros(5, SEGMENT)
    rows["length"] = [1000, 0, 200, 50, 300]
    rows["forward"] = [True, False, True, False, True]
    piece = Piece(_ends(1), "capture.pcap", rows.tobytes(), None)
    assert balance.decode_cost(piece) == 1550 + 3 * balance.FRAME_COST_BYTES


def test_deal_gives_each_task_the_least_loaded_share() -> None:
    costs = {_ends(i): cost for i, cost in enumerate([90, 80, 50, 40, 30, 30, 20, 10])}
    dealt = balance.deal(costs, 3)
    loads = [sum(costs[key] for key, task in dealt.items() if task == t) for t in range(3)]
    assert set(dealt) == set(costs)
    assert sorted(loads) == [110, 120, 120]  # costliest first, each to the least loaded: 90+30, 80+30+10, 50+40+20


def test_deal_keeps_only_the_costliest(monkeypatch) -> None:
    monkeypatch.setattr(balance, "MAX_DEALT", 10)
    costs = {_ends(i): 1000 - i for i in range(100)}
    dealt = balance.deal(costs, 2)
    assert set(dealt) == {_ends(i) for i in range(10)}


def test_spark_hash_int_is_sparks(spark) -> None:
    values = spark.range(0, 5000, 7).select(F.col("id").cast("int").alias("value"))
    rows = values.select("value", F.hash("value").alias("hash")).collect()
    assert [balance.spark_hash_int(row.value) for row in rows] == [row.hash for row in rows]


def test_dealt_rows_land_in_their_task(spark) -> None:
    tasks = 5
    dealt = {_ends(i): i % tasks for i in range(12)}
    rows = [(lower, higher) for lower, higher in dealt] + [_ends(i) for i in range(50, 60)]  # and undealt ones
    pieces = spark.createDataFrame(rows, "lower string, higher string")
    placed = (pieces.repartition(tasks, balance.task_column(dealt, tasks))
              .select("lower", "higher", F.spark_partition_id().alias("task")).collect())
    assert len(placed) == len(rows)
    assert {(row.lower, row.higher): row.task for row in placed if (row.lower, row.higher) in dealt} == dealt
