"""Failures exit non-zero with a clear line on stderr; several NameServers like mqadmin's -n."""

from __future__ import annotations

import pytest_twisted

from tests.admin.support import namesrv, refused_addr, run_cli, silent_server
from twisted_namesrv.admin.client import AdminError, split_namesrv_list
from twisted_namesrv.admin.commands import properties_line
from twisted_namesrv.state.config import parse_properties


@pytest_twisted.ensureDeferred
async def test_connection_refused():
    addr = refused_addr()
    run = await run_cli("-n", addr, "clusterList")
    assert (run.code, run.out) == (1, "")
    assert run.err == f"error: connect to {addr} failed: Connection refused\n"


@pytest_twisted.ensureDeferred
async def test_timeout():
    port = silent_server()
    try:
        addr = f"127.0.0.1:{port.getHost().port}"
        run = await run_cli("-n", addr, "--timeout", "0.3", "getKvConfig", "-s", "NS", "-k", "k")
    finally:
        await port.stopListening()
    assert (run.code, run.out) == (1, "")
    assert run.err == f"error: {addr}: no answer to GET_KV_CONFIG within 0.3 s\n"


@pytest_twisted.ensureDeferred
async def test_usage_errors():
    assert (await run_cli("topicRoute")).code == 2  # -t missing
    assert (await run_cli("noSuchCommand")).code == 2
    run = await run_cli("-n", "localhost", "clusterList")
    assert run.code == 1 and "bad NameServer address 'localhost'" in run.err
    assert (await run_cli("--timeout", "0", "clusterList")).code == 2


def test_namesrv_list_parsing():
    assert split_namesrv_list(" 127.0.0.1:9876; 127.0.0.1:9877;") == ["127.0.0.1:9876", "127.0.0.1:9877"]
    for bad in ("", ";", "host", "host:0", "host:x", ":9876"):
        try:
            split_namesrv_list(bad)
        except AdminError:
            continue
        raise AssertionError(f"{bad!r} accepted")


def test_config_update_body_reads_back_exactly():
    for key, value in [("k", "plain"), ("a b=c:d", " lead\\ing #x!\ttab\nnl"), ("k", "Zürich ☃"), ("k", "x🎉")]:
        line = properties_line(key, value)
        assert line.isascii()
        assert parse_properties(line) == {key: value}


@pytest_twisted.ensureDeferred
async def test_reads_fall_over_to_the_next_namesrv_and_writes_go_to_each(tmp_path):
    one, two = await namesrv(tmp_path, "one"), await namesrv(tmp_path, "two")
    dead = refused_addr()
    try:
        both = f"{one.addr};{two.addr}"
        run = await run_cli("-n", both, "updateKvConfig", "-s", "NS", "-k", "k", "-v", "v")
        assert run.code == 0 and run.out.count(" OK") == 2
        for server in (one, two):
            assert (await run_cli("-n", server.addr, "getKvConfig", "-s", "NS", "-k", "k")).out == "v\n"
        run = await run_cli("-n", f"{dead};{two.addr}", "getKvConfig", "-s", "NS", "-k", "k")
        assert (run.code, run.out, run.err) == (0, "v\n", "")
        run = await run_cli("-n", f"{dead};{one.addr}", "wipeWritePerm", "-b", "broker-x")
        assert run.code == 1
        assert run.out == f"wipe write perm of broker[broker-x] in name server[{one.addr}] OK, 0\n"
        assert run.err == f"error: connect to {dead} failed: Connection refused\n"
        run = await run_cli("-n", f"{dead};{dead}", "getKvConfig", "-s", "NS", "-k", "k")
        assert run.code == 1 and run.err.count("Connection refused") == 2
        run = await run_cli("-n", both, "getNamesrvConfig")
        assert run.code == 0 and run.out.count("============") == 4
    finally:
        await one.stop()
        await two.stop()
