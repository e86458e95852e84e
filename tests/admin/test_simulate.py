"""``namesrv-admin simulate-broker`` against our in-process NameServer: its brokers register with
their topics, heartbeat and unregister at the end; a refused registration fails the run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest_twisted

from tests.admin.support import namesrv, run_cli


@pytest_twisted.ensureDeferred
async def test_simulated_brokers_register_heartbeat_and_unregister(tmp_path):
    ns = await namesrv(tmp_path)
    seen = []
    routes = ns.service.state.routes
    real_register = routes.apply_registration

    def watching(*args, **kwargs):
        answer = real_register(*args, **kwargs)
        seen.append(sorted(routes.brokerAddrTable))
        return answer

    real_renew = routes.renew

    def renewing(*args, **kwargs):  # a heartbeat the same as the registration before it renews the broker
        answer = real_renew(*args, **kwargs)
        if answer is not None:
            seen.append(sorted(routes.brokerAddrTable))
        return answer

    routes.apply_registration = watching
    routes.renew = renewing
    try:
        run = await run_cli("-n", ns.addr, "simulate-broker", "--brokers", "2", "--topics", "TopicTest,T2,T3",
                            "--interval", "0.01", "--count", "2", "--broker-addr", "127.0.0.1:20911")
        assert (run.code, run.err) == (0, ""), run
        assert run.out.splitlines() == [
            f"registered DefaultCluster/broker-a 127.0.0.1:20911 with 3 topics (TopicTest, T2, T3) at {ns.addr}",
            f"registered DefaultCluster/broker-a-1 127.0.0.1:20913 with 3 topics (TopicTest, T2, T3) at {ns.addr}",
            "heartbeat 2: 2 of 2 registrations answered SUCCESS",
            f"unregistered broker-a from {ns.addr}", f"unregistered broker-a-1 from {ns.addr}"]
        assert len(seen) == 4 and seen[-1] == ["broker-a", "broker-a-1"]
        assert sorted(routes.topicQueueTable) == [] and routes.brokerLiveTable == {}  # unregistered
    finally:
        await ns.stop()


@pytest_twisted.ensureDeferred
async def test_a_single_topic_first_registration_is_refused_and_says_why(tmp_path):
    ns = await namesrv(tmp_path)
    try:
        run = await run_cli("-n", ns.addr, "simulate-broker", "--topics", "OnlyOne", "--count", "1")
        assert run.code == 1
        assert "refused by" in run.err and "single topic" in run.err
    finally:
        await ns.stop()


@pytest_twisted.ensureDeferred
async def test_bad_counts_are_usage_errors(tmp_path):
    run = await run_cli("-n", "127.0.0.1:1", "simulate-broker", "--brokers", "0")
    assert run.code == 2 and "--brokers" in run.err


def test_sigterm_unregisters_the_simulated_brokers_and_exits_0(tmp_path):
    """As the README's try-it section runs it: a server process, the simulator beside it, stopped by a signal."""
    env = dict(os.environ, HOME=str(tmp_path))
    server = subprocess.Popen([sys.executable, "-m", "twisted_namesrv", "--port", "0", "--data-dir", str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        boot = next(line for line in server.stdout if "boot success" in line)
        addr = re.search(r"address (127\.0\.0\.1:\d+)", boot).group(1)
        simulator = subprocess.Popen([sys.executable, "-m", "twisted_namesrv.admin", "-n", addr, "simulate-broker"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert simulator.stdout.readline().startswith("registered DefaultCluster/broker-a 127.0.0.1:10911")
            listed = subprocess.run([sys.executable, "-m", "twisted_namesrv.admin", "-n", addr, "clusterList"],
                                    capture_output=True, text=True, env=env, timeout=30)
            assert listed.stdout.split()[-3:] == ["broker-a", "0", "127.0.0.1:10911"], listed
        finally:
            simulator.send_signal(signal.SIGTERM)
            out, err = simulator.communicate(timeout=30)
        assert (simulator.returncode, out, err) == (0, f"unregistered broker-a from {addr}\n", "")
    finally:
        server.terminate()
        server.communicate(timeout=30)
