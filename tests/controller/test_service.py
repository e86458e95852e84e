"""The controller over the wire: bad input gets Java's answers or a clear one, a non-leader
answers 2007 (and 1005 with the leader's address), metrics and config codes."""

from __future__ import annotations

import pytest_twisted
from twisted.application.service import Service
from twisted.internet import reactor

from tests.support import connect, server_config
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.controller.config import ControllerConfig
from twisted_namesrv.controller.service import ControllerService
from twisted_namesrv.remoting import RemotingCommand, fastjson

from .support import start_controller


class Follower:
    """A Leadership that is not the leader (the etcd store's follower, in miniature)."""

    is_leader = False
    leader_address = "127.0.0.1:19999"

    def subscribe(self, callback) -> None:
        self.callback = callback


@pytest_twisted.inlineCallbacks
def test_bad_input_is_answered_not_crashed_on(tmp_path, monkeypatch) -> None:
    service, port = yield start_controller(tmp_path)
    client = yield connect(port)
    try:
        def ask(code, ext=None, body=None, opaque=[0]):  # noqa: B006 - a counter
            opaque[0] += 1
            return client.call(RemotingCommand.request(code, ext or {}, body, opaque=opaque[0]))

        unknown = yield ask(1007)
        assert (unknown.code, unknown.remark) == (3, " request type 1007 not supported")
        missing = yield ask(Req.CONTROLLER_APPLY_BROKER_ID, {"brokerName": "g", "clusterName": "C"})
        assert (missing.code, missing.remark) == (1, "the custom field <appliedBrokerId> is null")
        for body in (None, b"{", b'{"syncStateSet":"x"}', b"[1,2]"):
            bad = yield ask(Req.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "g", "masterBrokerId": "1",
                                                                  "masterEpoch": "1"}, body)
            assert bad.code == 1 and bad.remark.startswith("CONTROLLER_ALTER_SYNC_STATE_SET: "), (body, bad.remark)
        not_number = yield ask(Req.CONTROLLER_REGISTER_BROKER, {"brokerName": "g", "brokerId": "x",
                                                               "brokerAddress": "a:1"})
        assert (not_number.code, not_number.remark) == (1, "header field brokerId is not a number: 'x'")
        unknown_group = yield ask(Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "nope"})
        assert (unknown_group.code, unknown_group.remark, unknown_group.ext) == (2008, "Broker metadata is not "
                                                                                       "existed", {})
        # a body decoded at once past its bound (any peer's, as Java reads any size in a thread of its
        # pool): refused before it is decoded, a bad_request counted; here 16 MiB held the reactor seconds
        bad_before = service.manager.refusals.counts["controller", "bad_request"]
        big_set = yield ask(Req.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "g", "masterBrokerId": "1",
                                                                  "masterEpoch": "1"}, b" " * 65536 + b"{}")
        assert big_set.code == 1 and big_set.remark.startswith(
            "CONTROLLER_ALTER_SYNC_STATE_SET: a body of 65538 bytes is over the 65536 read at once")
        big_names = yield ask(Req.CONTROLLER_GET_SYNC_STATE_DATA, body=b"[" + b'"g",' * 262144 + b'"g"]')
        assert big_names.code == 1 and "a body of 1048581 bytes is over the 1048576 read at once" in big_names.remark
        assert service.manager.refusals.counts["controller", "bad_request"] == bad_before + 2
        # within the bound, a list of anything but names is refused at its first other value, not decoded
        # whole first (1 MiB of fastjson's bare keys read through the json module: half a second)
        decoded = []
        real = fastjson.loads
        monkeypatch.setattr(fastjson, "loads",
                            lambda data: (len(data) > 4096 and decoded.append(len(data))) or real(data))
        bare_keys = b",".join(b"%d:1" % i for i in range(100_000))
        objects = yield ask(Req.CONTROLLER_GET_SYNC_STATE_DATA, body=b"[{" + bare_keys + b"}]")
        assert (objects.code, objects.remark) == (1, "CONTROLLER_GET_SYNC_STATE_DATA: the body is not a JSON list of "
                                                     "broker names")
        assert decoded == []
        monkeypatch.undo()
        no_names = yield ask(Req.CONTROLLER_GET_SYNC_STATE_DATA, body=b"[]")
        assert (no_names.code, no_names.remark) == (1, "not set any response code")
        heartbeat = yield ask(Req.BROKER_HEARTBEAT, {"clusterName": "C", "brokerName": "g", "brokerAddr": "a:1"})
        assert (heartbeat.code, heartbeat.remark) == (2005, "Heart beat with empty brokerId")
        blocked = yield ask(Req.UPDATE_CONTROLLER_CONFIG, body=b"controllerStorePath=/tmp/x\n")
        assert (blocked.code, blocked.remark) == (16, "Can not update config in black list.")
        assert service.manager.refusals.counts["controller", "config_key"] == 1  # logged and counted
        updated = yield ask(Req.UPDATE_CONTROLLER_CONFIG, body=b"enableElectUncleanMaster=true\n")
        assert updated.code == 0 and service.config["enableElectUncleanMaster"] is True
        # a body that is not UTF-8 read as Java's new String(body, UTF_8): U+FFFD U+FFFD true, parsed as
        # Boolean.parseBoolean parses it (false), where it was answered string2Properties error
        not_utf8 = yield ask(Req.UPDATE_CONTROLLER_CONFIG, body=b"enableElectUncleanMaster=\xff\xfetrue\n")
        assert not_utf8.code == 0 and service.config["enableElectUncleanMaster"] is False
        updated = yield ask(Req.UPDATE_CONTROLLER_CONFIG, body=b"enableElectUncleanMaster=true\n")
        storm = yield ask(Req.UPDATE_CONTROLLER_CONFIG, body=b"electMasterMaxRetryCount=2147483647\n")
        assert (storm.code, storm.remark) == (1, "electMasterMaxRetryCount: 2147483647 is out of range (0 to 16)")
        assert service.config["electMasterMaxRetryCount"] == 3
        config = yield ask(Req.GET_CONTROLLER_CONFIG)
        assert "enableElectUncleanMaster=true\n" in bytes(config.body).decode()
        client.send(b"\x00\x00\x00\x02\xff\xff")  # not a frame: the channel goes, the controller stays
        yield client.closed
        again = yield connect(port)
        meta = yield again.call(RemotingCommand.request(Req.CONTROLLER_GET_METADATA_INFO, opaque=1))
        assert meta.ext["isLeader"] == "true"
        again.transport.loseConnection()
    finally:
        client.transport.loseConnection()
        yield service.stopService()
    requests = service.controller_metrics.request_total
    assert requests["controller_apply_broker_id", "failed"] == 1
    assert requests["controller_get_broker_epoch_cache", "failed"] == 1


@pytest_twisted.inlineCallbacks
def test_a_follower_answers_2007_and_names_the_leader(tmp_path) -> None:
    config = ControllerConfig({"controllerDLegerGroup": "G", "controllerDLegerSelfId": "n1",
                               "controllerDLegerPeers": "n0-127.0.0.1:19999;n1-127.0.0.1:0"})
    service = ControllerService(config, reactor, port=0, store_path=str(tmp_path), leadership=Follower())
    service.startService()
    yield service.ready
    client = yield connect(service.port.getHost().port)
    try:
        meta = yield client.call(RemotingCommand.request(Req.CONTROLLER_GET_METADATA_INFO, opaque=1))
        assert meta.ext == {"group": "G", "controllerLeaderId": "n0", "controllerLeaderAddress": "127.0.0.1:19999",
                            "isLeader": "false", "peers": "n0:127.0.0.1:19999;n1:127.0.0.1:0;"}
        refused = yield client.call(RemotingCommand.request(Req.CONTROLLER_GET_NEXT_BROKER_ID,
                                                            {"clusterName": "C", "brokerName": "g"}, opaque=2))
        assert (refused.code, refused.remark, refused.header.ext_fields) == (
            2007, "The controller is not in leader state", None)
    finally:
        client.transport.loseConnection()
        yield service.stopService()


def test_enable_controller_in_namesrv_without_peers_refuses_to_start(tmp_path) -> None:
    from twisted_namesrv import CannotStart
    from twisted_namesrv.service import NamesrvService

    config = server_config(tmp_path, enableControllerInNamesrv=True)
    try:
        NamesrvService.from_config(config, reactor)
    except CannotStart as exc:
        assert "controllerDLegerPeers" in str(exc)
    else:
        raise AssertionError("started without controllerDLegerPeers")


@pytest_twisted.inlineCallbacks
def test_java_keys_in_the_c_file_start_the_embedded_controller(tmp_path) -> None:
    from tests.support import free_port
    from twisted_namesrv.state.config import NamesrvConfig
    from twisted_namesrv.tap import Options

    port = free_port()
    props = tmp_path / "namesrv.properties"
    props.write_text(f"enableControllerInNamesrv=true\ncontrollerDLegerGroup=G1\ncontrollerDLegerPeers=n0-127.0.0.1:"
                     f"{port}\ncontrollerDLegerSelfId=n0\ncontrollerStorePath={tmp_path / 'store'}\n"
                     "notifyBrokerRoleChanged=false\nscanNotActiveBrokerInterval=2000\n")
    options = Options()
    options.parseOptions(["-c", str(props), "--port", "0", "--data-dir", str(tmp_path), "--strict-config"])
    assert isinstance(options.config, NamesrvConfig) and options.config.warnings == []
    from twisted_namesrv.tap import makeService

    service = makeService(options)
    service.startService()
    yield service.controller.ready
    try:
        assert service.controller.port.getHost().port == port
        assert service.controller.config["notifyBrokerRoleChanged"] is False
        assert service.controller.config["scanNotActiveBrokerInterval"] == 2000
        assert (tmp_path / "store" / "controller.log").exists()
        client = yield connect(port)
        meta = yield client.call(RemotingCommand.request(Req.CONTROLLER_GET_METADATA_INFO, opaque=1))
        assert meta.ext == {"group": "G1", "controllerLeaderId": "n0", "controllerLeaderAddress": f"127.0.0.1:{port}",
                            "isLeader": "true", "peers": f"n0:127.0.0.1:{port};"}
        client.transport.loseConnection()
    finally:
        yield service.stopService()


def test_twistd_namesrv_controller_options(tmp_path) -> None:
    import pytest

    from twisted_namesrv.controller import tap

    options = tap.Options()
    options.parseOptions(["--port", "0"])
    service = tap.makeService(options)
    assert isinstance(service, ControllerService) and service.listener.port_number == 0
    bad = tmp_path / "controller.properties"
    bad.write_text("controllerDLegerPeers=n0-127.0.0.1:1\ncontrollerDLegerSelfId=n9\n")
    with pytest.raises(SystemExit, match="controllerDLegerSelfId: n9 is not among controllerDLegerPeers"):
        tap.Options().parseOptions(["-c", str(bad)])


class FakeConsensus(Service):
    """EtcdConsensus's shape (a Twisted service; log, leadership, start, stop) over a file log: follower
    until started."""

    made: list = []

    def __init__(self, values, address, reactor) -> None:
        from twisted_namesrv.controller.log import FileControllerLog

        self.values, self.address = values, address
        self.log = FileControllerLog(values["kvConfigPath"] + ".ctl")
        self.log.open()
        self.leadership = Follower()
        self.leadership.leader_address = None
        self.stopped = False
        FakeConsensus.made.append(self)

    @classmethod
    def from_config(cls, values, address, reactor=None):
        return cls(values, address, reactor)

    def start(self):
        from twisted.internet import defer

        self.leadership.is_leader, self.leadership.leader_address = True, self.address
        self.leadership.callback(True, self.address)
        return defer.succeed(None)

    def stop(self):
        self.stopped = True
        self.log.close()
        return None

    def startService(self) -> None:
        super().startService()
        self.start()

    def stopService(self):
        super().stopService()
        return self.stop()


@pytest_twisted.inlineCallbacks
def test_controller_type_etcd_wires_the_consensus_in(tmp_path, monkeypatch) -> None:
    import sys
    import types

    from tests.support import free_port

    fake = types.ModuleType("twisted_namesrv.controller.etcd")
    fake.EtcdConsensus = FakeConsensus
    monkeypatch.setitem(sys.modules, "twisted_namesrv.controller.etcd", fake)
    port = free_port()
    config = server_config(tmp_path, enableControllerInNamesrv=True, controllerType="etcd",
                           controllerEtcdEndpoints="http://127.0.0.1:2379")
    config.extra.update({"controllerDLegerPeers": f"n0-127.0.0.1:{port};n1-127.0.0.1:1",
                         "controllerDLegerSelfId": "n0"})
    from twisted_namesrv.service import NamesrvService

    service = NamesrvService.from_config(config, reactor)
    consensus = FakeConsensus.made[-1]
    assert consensus.address == f"127.0.0.1:{port}"
    assert consensus.values["controllerEtcdEndpoints"] == "http://127.0.0.1:2379"
    assert service.controller.getServiceNamed("consensus") is consensus  # started and stopped as a child
    service.startService()
    yield service.controller.ready
    client = yield connect(port)
    try:
        answer = yield client.call(RemotingCommand.request(Req.CONTROLLER_GET_NEXT_BROKER_ID,
                                                           {"clusterName": "C", "brokerName": "g"}, opaque=1))
        assert (answer.code, answer.ext["nextBrokerId"]) == (0, "1")  # the leader, once it campaigned
    finally:
        client.transport.loseConnection()
        yield service.stopService()
    assert consensus.stopped
    no_port = server_config(tmp_path, enableControllerInNamesrv=True, controllerType="etcd",
                            controllerEtcdEndpoints="http://127.0.0.1:2379")
    from twisted_namesrv import CannotStart

    try:
        NamesrvService.from_config(no_port, reactor, controller_port=0)
    except CannotStart as exc:
        assert "controllerType=etcd" in str(exc)
    else:
        raise AssertionError("an etcd peer started without a fixed address")


@pytest_twisted.inlineCallbacks
def test_many_pipelined_requests_are_all_answered_in_order(tmp_path) -> None:
    service, port = yield start_controller(tmp_path)
    client = yield connect(port)
    try:
        codes = (Req.CONTROLLER_GET_NEXT_BROKER_ID, Req.CONTROLLER_APPLY_BROKER_ID)
        requests = [RemotingCommand.request(codes[n % 2], {"clusterName": "C", "brokerName": f"g{n // 2}",
                                                           "appliedBrokerId": "1", "registerCheckCode": "a:1;1"},
                                            opaque=n + 1) for n in range(1000)]
        client.send(b"".join(r.encode() for r in requests))  # one write: the frames arrive together
        answers = []
        for request in requests:
            answers.append((yield client.answer(request.opaque)))
        assert [a.code for a in answers] == [0] * 1000
        assert {a.ext["nextBrokerId"] for a in answers[0::2]} == {"1"}
    finally:
        client.transport.loseConnection()
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_the_listener_and_both_scans_are_child_services(tmp_path):
    """Twisted's service tree, not calls started by hand: stopping the service stops the scans."""
    service, _ = yield start_controller(tmp_path)
    children = {child.name: child for child in service}
    assert set(children) == {"controller", "scanNotActiveBrokerInterval", "scanInactiveMasterInterval"}
    assert children["scanInactiveMasterInterval"].step == 5.0 and all(child.running for child in service)
    yield service.stopService()
    assert not any(child.running for child in service)


@pytest_twisted.inlineCallbacks
def test_what_the_tables_hold_is_bounded_and_refused_before_the_log(tmp_path, monkeypatch) -> None:
    """APPLY_BROKER_ID made a broker set, and REGISTER_BROKER an address change, each an event in the
    log for good and replayed at every start, with no bound (Java has none; unsigned without ACL):
    new sets without end, or one id's address flipped between two 30,000-character strings, an event of
    60 KB a request. Past a limit each is refused before anything is written, logged and counted."""
    from twisted_namesrv.controller import replicas

    monkeypatch.setattr(replicas, "MAX_BROKER_SETS", 2)
    monkeypatch.setattr(replicas, "MAX_BROKER_IDS", 2)
    service, port = yield start_controller(tmp_path)
    client = yield connect(port)
    try:
        def ask(code, ext, opaque=[0]):  # noqa: B006 - a counter
            opaque[0] += 1
            return client.call(RemotingCommand.request(code, ext, None, opaque=opaque[0]))

        def apply(name, broker_id, check="10.0.0.1:10911;x"):
            return ask(Req.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "C", "brokerName": name,
                                                        "appliedBrokerId": str(broker_id), "registerCheckCode": check})

        for name in ("g1", "g2"):
            assert (yield apply(name, 1)).code == 0
        written = service.manager.events_applied
        third = yield apply("g3", 1)
        assert third.code == 2005 and "a new broker set, and 2 are registered: at most 2" in third.remark
        assert (yield apply("g1", 2, "10.0.0.2:10911;y")).code == 0
        many = yield apply("g1", 3, "10.0.0.3:10911;z")
        assert many.code == 2005 and "holds 2 ids: at most 2" in many.remark
        long = yield apply("g2", 2, "x" * 30_000)
        assert long.code == 2005 and "a field of 30000 characters, over 512" in long.remark
        flip = yield ask(Req.CONTROLLER_REGISTER_BROKER, {"clusterName": "C", "brokerName": "g1", "brokerId": "1",
                                                           "brokerAddress": "a" * 30_000})
        assert flip.code == 2005
        assert service.manager.events_applied == written + 1  # only g1's second id
        counts = service.manager.refusals.counts
        assert (counts["controller", "max_broker_groups"], counts["controller", "max_brokers_per_group"],
                counts["controller", "max_name_length"]) == (1, 1, 2)
        assert set(service.manager.replicas.replica_info_table) == {"g1", "g2"}
    finally:
        client.transport.loseConnection()
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_the_heartbeat_table_is_bounded_and_refused_past_it(tmp_path, monkeypatch) -> None:
    """BROKER_HEARTBEAT kept any (cluster, name, id) alive for the timeout it announced, with no
    bound (unsigned without ACL, as in Java): one connection sent 20,000 ghosts with
    heartbeatTimeoutMills=2^62, the process grew 10.5 MB and wrote 20,000 log lines, and they stayed
    when it closed (a channel's close ends one broker).  Past a limit a new one is refused, logged and
    counted; one known alive still beats."""
    from twisted_namesrv.controller import heartbeat

    monkeypatch.setattr(heartbeat, "MAX_LIVE_BROKERS", 2, raising=False)
    service, port = yield start_controller(tmp_path)
    client = yield connect(port)
    try:
        def beat(name, addr="10.0.0.1:10911", opaque=[0]):  # noqa: B006 - a counter
            opaque[0] += 1
            return client.call(RemotingCommand.request(Req.BROKER_HEARTBEAT, {
                "clusterName": "C", "brokerName": name, "brokerAddr": addr, "brokerId": "0",
                "heartbeatTimeoutMills": str(2**62)}, None, opaque=opaque[0]))

        assert (yield beat("g1")).code == 0 and (yield beat("g2")).code == 0
        third = yield beat("g3")
        assert third.code == 2005 and "2 brokers are alive: at most 2" in third.remark
        assert (yield beat("g1")).code == 0  # known: still beats
        long = yield beat("g1", "x" * 30_000)
        assert long.code == 0  # known alive (Java keeps its first address)
        assert (yield beat("y" * 30_000)).code == 2005
        counts = service.manager.refusals.counts
        assert (counts["controller", "max_brokers"], counts["controller", "max_name_length"]) == (1, 1)
        assert {i.broker_name for i in service.manager.heartbeats.broker_live_table} == {"g1", "g2"}
    finally:
        client.transport.loseConnection()
        yield service.stopService()
