"""The real C++ client 1.x (PyPI rocketmq==0.4.4) given only an address server's URL, our
``/rocketmq/nsaddr``, finds our NameServer through it, looks TopicTest's route up there and sends
through the broker double.  Skipped without the clients (tools/install_clients.sh), failed
instead with NAMESRV_REQUIRE_CLIENTS=1 (CI)."""

from __future__ import annotations

import uuid

import pytest_twisted
from twisted.internet import reactor

from tests.interop.broker_double import BrokerDouble
from tests.interop.test_real_clients import CLIENTS, client_env, require_client, run_client, summarize
from tests.support import free_port, server_config, start_server
from twisted_namesrv.remoting import RequestCode, ResponseCode
from twisted_namesrv.web.nsaddr import NsaddrResource


@pytest_twisted.inlineCallbacks
def test_cpp_client_finds_our_namesrv_through_the_built_in_address_server(tmp_path, clients_dir,
                                                                          namesrv_exchanges, monkeypatch):
    client = CLIENTS["cpp1"]
    require_client(client, clients_dir)
    polls: list[bytes] = []
    answer = NsaddrResource.answer

    def counted(resource, request):
        polls.append(request.uri)
        return answer(resource, request)

    monkeypatch.setattr(NsaddrResource, "answer", counted)
    service, port = yield start_server(server_config(tmp_path, metricsPort=free_port()))
    web = yield service.web_ready
    double = BrokerDouble(reactor)
    try:
        registered = yield double.start(port)
        assert registered.code == ResponseCode.SUCCESS, registered.header
        broker_link = f"127.0.0.1:{double.namesrv_link.transport.getHost().port}"
        domain = f"http://127.0.0.1:{web.getHost().port}/rocketmq/nsaddr"
        executable, args, extra = client.command(clients_dir, domain, "PG_NSADDR", f"nsaddr {uuid.uuid4().hex}")
        run = yield run_client(executable, args, client_env(tmp_path, clients_dir, extra), tmp_path)
    finally:
        yield double.stop()
        yield service.stopService()

    print(f"\n[cpp1 via {domain}] polls {polls}; client ran {run.seconds:.2f}s, exit {run.exit_code}")
    for line in summarize(namesrv_exchanges, broker_link):
        print(f"  namesrv <- {line}")
    assert polls and all(uri.startswith(b"/rocketmq/nsaddr") for uri in polls), polls
    assert not run.timed_out and run.exit_code == 0, run.describe()
    result = run.result()
    assert result is not None and result["ok"], run.describe()
    routes = [x for x in namesrv_exchanges if x.peer != broker_link
              and x.request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and x.request.ext.get("topic") == "TopicTest"]
    assert routes and all(x.response.code == ResponseCode.SUCCESS for x in routes), summarize(namesrv_exchanges, "")
    assert len(double.sends("TopicTest")) == 1
