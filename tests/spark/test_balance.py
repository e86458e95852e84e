"""Dealing the costliest 4-tuples out to the decoding tasks (balance.py)."""

from __future__ import annotations

import numpy as np
from pyspark.sql import functions as F

from spark_analysis.capture.inputs import Piece
from spark_analysis.capture.reassembly import SEGMENT
from spark_analysis.spark import balance


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


def _loads(costs: dict, dealt: dict, tasks: int) -> list[int]:
    return [sum(costs[key] for key, task in dealt.items() if task == t) for t in range(tasks)]


def test_deal_with_equal_shares_gives_each_task_the_least_loaded_share() -> None:
    costs = {_ends(i): cost for i, cost in enumerate([90, 80, 50, 40, 30, 30, 20, 10])}
    dealt = balance.deal(costs, [1, 1, 1])
    assert set(dealt) == set(costs)
    # costliest first, each to the least loaded: 90+30, 80+30+10, 50+40+20
    assert sorted(_loads(costs, dealt, 3)) == [110, 120, 120]


def test_deal_fills_tasks_to_their_shares() -> None:
    costs = {_ends(i): 10 for i in range(60)}
    dealt = balance.deal(costs, balance.task_shares(2))
    assert _loads(costs, dealt, 4) == [200, 200, 100, 100]


def test_deal_counts_what_hashes_evenly_into_every_task() -> None:
    # 60 worth of small pieces hash 15 into each of the 4 tasks: the dealt ones make up the rest
    costs = {_ends(i): 10 for i in range(64)}
    dealt = balance.deal(costs, balance.task_shares(2), hashed=60)
    assert _loads(costs, dealt, 4) == [220, 220, 100, 100]


def test_task_shares_per_core_biggest_first_and_equal_where_more_are_needed() -> None:
    assert balance.task_shares(1) == [1, 1]
    assert balance.task_shares(2) == [2, 2, 1, 1]
    assert balance.task_shares(3) == [2, 2, 2, 1, 1, 1]
    assert balance.task_shares(2, at_least=4) == [2, 2, 1, 1]
    assert balance.task_shares(2, at_least=5) == [1] * 5


def test_the_decoding_batches_a_task_a_core_takes_are_claimed_shares_and_one_on_one_core() -> None:
    assert balance.claimed_decoding(1) == [1]
    assert balance.claimed_decoding(2) == balance.claimed_shares(2) == [4, 4, 2, 2, 1, 1]
    assert balance.claimed_decoding(1, at_least=3) == [1, 1, 1]
    assert balance.claimed_decoding(2, at_least=7) == [1] * 7


def test_batches_taken_beside_the_replay_end_the_two_cores_at_most_a_small_batch_apart() -> None:
    """The liveness stage's two tasks take the batches beside the replay (job.Claims), biggest first,
    each core the next when it is free, one core after its replay: whatever the replay's length up
    to the work beside it, the cores end at most the smallest batch (a fourteenth of it) apart,
    where batches of a task's shares ([2, 2, 1, 1]) left one idle up to a sixth of it."""
    shares = balance.claimed_shares(2)

    def apart(replay: float) -> float:
        free = [replay, 0.0]
        for share in shares:
            core = free.index(min(free))
            free[core] += share / sum(shares)
        return max(free) - min(free)

    assert max(apart(replay / 100) for replay in range(101)) <= 1 / 14 + 1e-9


def test_deal_keeps_only_the_costliest(monkeypatch) -> None:
    monkeypatch.setattr(balance, "MAX_DEALT", 10)
    costs = {_ends(i): 1000 - i for i in range(100)}
    dealt = balance.deal(costs, [1, 1])
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


def test_a_4_tuple_is_guessed_a_client_s_when_its_server_sent_it_twice_what_it_was_sent() -> None:
    """Route answers carry the routes (a client's lookups), requests carry the tables (a broker's
    registrations); a snap length's cut counts what was sent; an end not known a server is no guess."""
    server = "10.0.0.1:9876"
    client, broker, cut, unknown = (f"10.1.0.{n}:40000" for n in range(4))

    def sent(ends: tuple[str, str], lengths: list[int], forward: list[bool], missing: list[int]) -> tuple:
        rows = np.zeros(len(lengths), SEGMENT)
        rows["length"], rows["forward"], rows["missing"] = lengths, forward, missing
        return ends, balance.sent_bytes(Piece(ends, "capture.pcap", rows.tobytes(), None))

    found = dict([sent((server, client), [200, 500], [False, True], [0, 0]),  # asks 200, told 500
                  sent((server, broker), [9000, 150], [False, True], [0, 0]),  # registers 9000, told 150
                  sent((server, cut), [200, 150], [False, True], [8800, 0]),  # the same cut at 200 bytes
                  sent((server, unknown), [100, 900], [False, True], [0, 0])])
    assert found[server, client] == (500, 200)  # by the lower end (the server here), by the higher
    counted = {(ends, by_lower): count for ends, (lower, higher) in found.items()
               for by_lower, count in ((True, lower), (False, higher))}
    sides = {ends: server for ends in found if ends[1] != unknown}
    assert balance.guessed_clients(counted, sides) == {(server, client)}


def _calls_to_the_jvm(monkeypatch) -> list[int]:
    """A counter of the driver's calls to the JVM (Py4J commands) from now on."""
    from py4j.clientserver import ClientServerConnection

    calls = [0]
    send = ClientServerConnection.send_command

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return send(self, *args, **kwargs)

    monkeypatch.setattr(ClientServerConnection, "send_command", counted)
    return calls


def test_the_deal_costs_the_driver_a_few_calls_to_the_jvm(spark, monkeypatch) -> None:
    """The deal and the guess are made between the Spark jobs, while every core waits for the
    driver: each an expression of one call, not one per function and column (47 and 35 before)."""
    dealt = {_ends(i): i % 6 for i in range(120)}
    balance.task_column(dealt, 6), balance.among(dealt)  # the functions' first lookups
    calls = _calls_to_the_jvm(monkeypatch)
    balance.task_column(dealt, 6)
    balance.among(dealt)
    assert calls[0] <= 6


def test_the_guessed_4_tuples_are_told_apart_whatever_their_text(spark) -> None:
    """The 4-tuples go into the expression as a SQL string literal: a quote or a backslash in one
    (no address has them; a file's odd name might some day) neither breaks nor widens it."""
    odd = [("10.0.0.1:9876", "a'b\\c:1"), ("10.0.0.1:9876", "\\'"), ("x", "'z'")]
    rows = [*odd, ("10.0.0.1:9876", "a'b\\c:2"), ("x", "z")]
    pieces = spark.createDataFrame(rows, "lower string, higher string")
    found = pieces.where(balance.among(odd)).collect()
    assert sorted((row.lower, row.higher) for row in found) == sorted(odd)
    placed = (pieces.repartition(3, balance.task_column(dict(zip(odd, (2, 0, 1), strict=True)), 3))
              .select("lower", "higher", F.spark_partition_id().alias("task")).collect())
    assert {(row.lower, row.higher): row.task for row in placed if (row.lower, row.higher) in odd} == dict(
        zip(odd, (2, 0, 1), strict=True))


def test_spark_hash_strings_is_sparks(spark) -> None:
    """Every length's tail (0-3 bytes past the last word), bytes past ASCII (signed in Spark's mix)."""
    rows = [("10.0.0.1:9876", f"10.1.0.{i}:{40000 + i}") for i in range(40)]
    rows += [("", ""), ("a", "ab"), ("abc", "abcd"), ("é", "ünï:1"), ("\u20ac\u20ac", "x" * 37)]
    found = spark.createDataFrame(rows, "lower string, higher string").select(
        "lower", "higher", F.hash("lower", "higher").alias("hash")).collect()
    assert [balance.spark_hash_strings((row.lower, row.higher)) for row in found] == [row.hash for row in found]


def test_task_of_is_where_the_shuffle_sends_a_4_tuple(spark) -> None:
    """The driver handing kept pieces out itself (a local master) sends each 4-tuple to the task
    task_column's shuffle does: the dealt ones to theirs, the others by Spark's hash."""
    tasks = 6
    dealt = {_ends(i): (i * 5) % tasks for i in range(10)}
    rows = [_ends(i) for i in range(60)]
    pieces = spark.createDataFrame(rows, "lower string, higher string")
    for deal in (dealt, {}):
        placed = (pieces.repartition(tasks, balance.task_column(deal, tasks))
                  .select("lower", "higher", F.spark_partition_id().alias("task")).collect())
        assert {(row.lower, row.higher): row.task for row in placed} == {
            key: balance.task_of(key, deal, tasks) for key in rows}
