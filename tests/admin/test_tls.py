"""``namesrv-admin --tls``: against an enforcing NameServer whose certificate a CA made for this
run signed -- verified with ``--tls-ca`` (or $NAMESRV_TLS_CA), with a client certificate for
``tls.server.authClient``; and the errors that say what to do when TLS is missing or wrong."""

from __future__ import annotations

import os
import sys

import pytest
import pytest_twisted
from twisted.internet.utils import getProcessOutputAndValue

from tests.admin.support import Run, run_cli
from tests.support import server_config, start_server
from tests.tls_support import make_pki
from twisted_namesrv.admin.client import TLS_HINT


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_config(tmp_path, pki, mode: str = "enforcing", **values):
    return server_config(tmp_path, **{"tls.server.mode": mode, "tls.server.certPath": str(pki.cert),
                                      "tls.server.keyPath": str(pki.key), **values})


@pytest_twisted.async_yield_fixture
async def enforcing(tmp_path, pki):
    service, port = await start_server(tls_config(tmp_path, pki))
    yield f"127.0.0.1:{port}"
    await service.stopService()


@pytest_twisted.ensureDeferred
async def test_cluster_list_over_tls_as_a_real_process(enforcing, pki):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAMESRV_")}
    argv = ["-m", "twisted_namesrv.admin", "-n", enforcing, "--tls", "--tls-ca", str(pki.ca), "clusterList"]
    out, err, code = await getProcessOutputAndValue(sys.executable, argv, env=env)
    assert (code, err) == (0, b"") and out.decode().startswith("#Cluster Name")
    # the environment's equivalents, as a service account would set them
    out, err, code = await getProcessOutputAndValue(
        sys.executable, ["-m", "twisted_namesrv.admin", "-n", enforcing, "clusterList"],
        env={**env, "NAMESRV_TLS": "true", "NAMESRV_TLS_CA": str(pki.ca)})
    assert (code, err) == (0, b"") and out.decode().startswith("#Cluster Name")


@pytest_twisted.ensureDeferred
async def test_plain_against_an_enforcing_server_suggests_tls(enforcing):
    run: Run = await run_cli("-n", enforcing, "clusterList")
    assert run.code == 1
    assert TLS_HINT in run.err and "before answering GET_BROKER_CLUSTER_INFO" in run.err


@pytest_twisted.ensureDeferred
async def test_simulate_broker_speaks_tls_when_told(enforcing, pki, tmp_path):
    """simulate-broker made its connections plain whatever --tls said: its registrations went in
    clear to a plain server, and an enforcing one refused them all."""
    run: Run = await run_cli("-n", enforcing, "--tls-ca", str(pki.ca), "simulate-broker", "--count", "1")
    assert (run.code, run.err) == (0, "") and "registered DefaultCluster/broker-a" in run.out
    service, port = await start_server(server_config(tmp_path))
    try:
        run = await run_cli("-n", f"127.0.0.1:{port}", "--tls-ca", str(pki.ca), "simulate-broker", "--count", "1")
    finally:
        await service.stopService()
    assert run.code == 1 and "TLS handshake failed" in run.err


@pytest_twisted.ensureDeferred
async def test_a_certificate_the_trust_store_does_not_know_is_named(enforcing):
    run: Run = await run_cli("-n", enforcing, "--tls", "clusterList")  # the system's trust store: no test CA in it
    assert run.code == 1 and "its TLS certificate is not trusted" in run.err and "--tls-ca" in run.err


@pytest_twisted.ensureDeferred
async def test_tls_against_a_plain_server_says_the_handshake_failed(tmp_path, pki):
    service, port = await start_server(server_config(tmp_path))
    try:
        run: Run = await run_cli("-n", f"127.0.0.1:{port}", "--tls-ca", str(pki.ca), "clusterList")
    finally:
        await service.stopService()
    assert run.code == 1 and "TLS handshake failed" in run.err and "tls.server.mode" in run.err


@pytest_twisted.ensureDeferred
async def test_auth_client_wants_the_client_certificate(tmp_path, pki):
    config = tls_config(tmp_path, pki, **{"tls.server.authClient": True, "tls.server.trustCertPath": str(pki.ca)})
    service, port = await start_server(config)
    addr = f"127.0.0.1:{port}"
    try:
        anonymous: Run = await run_cli("-n", addr, "--tls", "--tls-ca", str(pki.ca), "clusterList")
        signed: Run = await run_cli("-n", addr, "--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert),
                                    "--tls-key", str(pki.client_key), "clusterList")
    finally:
        await service.stopService()
    assert anonymous.code == 1 and addr in anonymous.err
    assert signed.code == 0 and signed.out.startswith("#Cluster Name"), signed.err


@pytest_twisted.ensureDeferred
async def test_unusable_tls_files_are_usage_errors_naming_them(tmp_path, pki):
    missing = str(tmp_path / "missing.pem")
    run: Run = await run_cli("-n", "127.0.0.1:1", "--tls-ca", missing, "clusterList")
    assert run.code == 2 and f"--tls-ca {missing}" in run.err
    run = await run_cli("-n", "127.0.0.1:1", "--tls-cert", str(pki.ca), "--tls-key", missing, "clusterList")
    assert run.code == 2 and "--tls-cert" in run.err
    run = await run_cli("-n", "127.0.0.1:1", "--tls-key", str(pki.client_key), "clusterList")
    assert run.code == 2 and "--tls-key needs --tls-cert" in run.err
