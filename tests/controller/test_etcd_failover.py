"""Issue 32's end-to-end check without Java: three NameServer processes (``python -m twisted_namesrv
-c FILE``) whose embedded controllers are peers on a real etcd, and the scripted pair of
controller-mode brokers (broker_pair.py).

The followers name the leader (1005) and refuse the rest (2007); the brokers get ids, one is
elected master and the slave joins the sync-state set; the controller leader's process is killed
with SIGKILL; a survivor leads within a few seconds with the same state; then the master broker
dies, and the new leader elects the slave, pushes NOTIFY_BROKER_ROLE_CHANGED (1008) to it, and
takes the killed broker back as slave.

Real time with a 2 s lease: every wait has a bound, so a broken handover fails instead of hanging.
The processes and etcd are stopped whatever happens (and die with the test process if it is killed).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task
from twisted.internet.error import ConnectError

from tests.controller.etcd_support import _die_with_parent, etcd  # noqa: F401  (etcd: the fixture)
from tests.support import TIMEOUT, connect, free_port
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.remoting import RemotingCommand, RequestCode, fastjson
from twisted_namesrv.remoting.codes import V5_3_3

from .broker_pair import ControllerModeBroker

TTL = 2  # seconds: the controllers' etcd lease
START = 15  # seconds three NameServer processes may take to start and agree on a leader
BOUND = 40  # seconds the whole test may take
HANDOVER = TTL + 6  # a killed leader's successor leads within this many seconds, or the test fails
REPO = Path(__file__).resolve().parents[2]
GROUP_NAME = "broker-ctl"


class NamesrvProcess:
    """One ``python -m twisted_namesrv -c FILE`` with its embedded controller; ``peer_id`` as in
    controllerDLegerPeers.  Its output goes to ``namesrv.log`` beside its -c file (appended across restarts)."""

    def __init__(self, peer_id: str, namesrv_port: int, controller_port: int, config: Path) -> None:
        self.peer_id, self.namesrv_port, self.controller_port = peer_id, namesrv_port, controller_port
        self.config = config
        self.log_path = config.with_name("namesrv.log")
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "twisted_namesrv", "-c", str(self.config), "--data-dir",
                 str(self.config.with_name("data"))], cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def controller_address(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

    def kill(self) -> None:
        """SIGKILL: no lease revoked, no connection closed cleanly."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(10)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-1500:] if self.log_path.exists() else ""


def start_namesrvs(tmp_path: Path, endpoint: str, count: int = 3) -> list[NamesrvProcess]:
    ports: set[int] = set()
    while len(ports) < 2 * count:
        ports.add(free_port())
    namesrv_ports, controller_ports = sorted(ports)[:count], sorted(ports)[count:]
    peers = ";".join(f"n{i}-127.0.0.1:{port}" for i, port in enumerate(controller_ports))
    group = f"g{uuid.uuid4().hex[:12]}"  # its own keys in the module's etcd
    started = []
    for i, (namesrv_port, controller_port) in enumerate(zip(namesrv_ports, controller_ports, strict=True)):
        home = tmp_path / f"n{i}"
        home.mkdir()
        config = home / "namesrv.conf"
        config.write_text(f"listenPort={namesrv_port}\nbindAddress=127.0.0.1\nenableControllerInNamesrv=true\n"
                          f"controllerType=etcd\ncontrollerEtcdEndpoints={endpoint}\n"
                          f"controllerEtcdKeyPrefix=/test/e2e/\ncontrollerEtcdLeaseTtlSeconds={TTL}\n"
                          f"controllerDLegerGroup={group}\ncontrollerDLegerPeers={peers}\n"
                          f"controllerDLegerSelfId=n{i}\n")
        started.append(NamesrvProcess(f"n{i}", namesrv_port, controller_port, config))
    return started


async def ask(port: int, code: int, ext: dict | None = None, body: bytes | None = None) -> RemotingCommand | None:
    """One request on a connection of its own; None when nothing answers there."""
    try:
        link = await connect(port)
    except ConnectError:
        return None
    try:
        return await link.call(RemotingCommand.request(code, ext or {}, body, opaque=1, version=V5_3_3))
    except (ConnectionError, defer.TimeoutError):
        return None
    finally:
        link.transport.loseConnection()


async def metadata(node: NamesrvProcess) -> dict | None:
    answer = await ask(node.controller_port, Req.CONTROLLER_GET_METADATA_INFO)
    return None if answer is None else answer.ext


async def agreed_leader(nodes: list[NamesrvProcess], timeout: float, what: str) -> NamesrvProcess:
    """Poll 1005 until exactly one of ``nodes`` says it leads and every other names it; its node."""
    deadline = reactor.seconds() + timeout
    seen: list[dict | None] = []
    while reactor.seconds() < deadline:
        for node in nodes:
            if not node.running:
                raise AssertionError(f"NameServer {node.peer_id} exited: {node.log_tail()}")
        seen = [await metadata(node) for node in nodes]
        leading = [node for node, meta in zip(nodes, seen, strict=True) if meta and meta["isLeader"] == "true"]
        if len(leading) == 1 and all(meta and meta.get("controllerLeaderAddress") == leading[0].controller_address
                                     for meta in seen):
            return leading[0]
        await task.deferLater(reactor, 0.1, lambda: None)
    raise AssertionError(f"not within {timeout} s: {what}; the controllers answer {seen}")


async def wait_until(check, timeout: float, what: str) -> None:
    """Poll the async ``check()`` until true; fail after ``timeout`` s naming ``what``."""
    deadline = reactor.seconds() + timeout
    while not await check():
        if reactor.seconds() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await task.deferLater(reactor, 0.1, lambda: None)


async def replica_info(node: NamesrvProcess) -> tuple[dict, list[int], int]:
    """1004 from ``node``: the group's master and its epoch (header), the sync-state set and its epoch (body)."""
    answer = await ask(node.controller_port, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP_NAME})
    assert answer is not None and answer.code == 0, answer and answer.header
    body = fastjson.loads(bytes(answer.body))
    return answer.ext, sorted(body["syncStateSet"]), body["syncStateSetEpoch"]


async def alive_ids(node: NamesrvProcess) -> set[int]:
    """The members ``node`` (the leader) sees alive, from 1006."""
    answer = await ask(node.controller_port, Req.CONTROLLER_GET_SYNC_STATE_DATA, body=f'["{GROUP_NAME}"]'.encode())
    if answer is None or answer.code != 0:
        return set()
    info = fastjson.loads(bytes(answer.body))["replicasInfoTable"].get(GROUP_NAME, {})
    return {r["brokerId"] for r in info.get("inSyncReplicas", []) + info.get("notInSyncReplicas", []) if r["alive"]}


async def route(namesrv_port: int) -> dict[int, str]:
    answer = await ask(namesrv_port, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "CtlTopic"})
    assert answer is not None and answer.code == 0, answer and answer.header
    data = fastjson.loads(bytes(answer.body))
    return {int(k): v for k, v in data["brokerDatas"][0]["brokerAddrs"].items()}


@pytest.mark.parametrize("beat_every_controller", [False, True], ids=["beat-the-leader", "beat-every-controller"])
@pytest_twisted.ensureDeferred
async def test_three_namesrvs_on_etcd_the_controller_leaders_process_killed_a_broker_failover_still_elects(
        tmp_path, etcd, beat_every_controller):  # noqa: F811
    """``beat_every_controller``: the brokers heartbeat the followers too, as 5.3.3's ReplicasManager
    does, so the new leader knows who is alive before anyone finds it; otherwise they heartbeat
    the leader only and move to the new one once it leads (liveness learned afresh there).
    The whole run is bounded: past BOUND s it is cancelled (processes killed on the way out) and fails."""
    run = defer.ensureDeferred(failover(tmp_path, etcd.endpoint, beat_every_controller))
    try:
        await run.addTimeout(BOUND, reactor)
    except defer.TimeoutError:
        raise AssertionError(f"the failover run took more than {BOUND} s (cancelled; the logs above)") from None


async def failover(tmp_path: Path, endpoint: str, beat_every_controller: bool) -> None:
    nodes = start_namesrvs(tmp_path, endpoint)
    c0, c1 = ControllerModeBroker(reactor), ControllerModeBroker(reactor)
    for broker in (c0, c1):  # liveness from the connection here, not from a heartbeat timing out mid-test
        broker.heartbeat_timeout_ms = 120_000
    try:
        leader = await agreed_leader(nodes, START, "three NameServers, one controller leader known to all")
        followers = [node for node in nodes if node is not leader]
        meta = await metadata(followers[0])
        assert meta is not None
        assert (meta["isLeader"], meta["controllerLeaderAddress"], meta["controllerLeaderId"]) == (
            "false", leader.controller_address, leader.peer_id)
        refused = await ask(followers[0].controller_port, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP_NAME})
        assert refused is not None
        assert (refused.code, refused.remark) == (2007, "The controller is not in leader state")
        refused = await ask(followers[1].controller_port, Req.CONTROLLER_GET_NEXT_BROKER_ID, {
            "clusterName": "CtlCluster", "brokerName": GROUP_NAME})
        assert refused is not None and refused.code == 2007

        # the brokers register with a NameServer that outlives the controller leader
        namesrv_port = followers[0].namesrv_port
        await c0.start_in_controller_mode(namesrv_port, leader.controller_port)
        await c1.start_in_controller_mode(namesrv_port, leader.controller_port)
        if beat_every_controller:
            for broker in (c0, c1):
                for node in followers:
                    await broker.heartbeat_also_to(node.controller_port)
        assert (c0.controller_id, c0.master_id, c0.master_epoch, c0.is_master) == (1, 1, 1, True)
        assert (c1.controller_id, c1.master_id, c1.master_epoch, c1.is_master) == (2, 1, 1, False)
        answer = await c0.alter_sync_state_set([1, 2])
        assert (answer.code, answer.ext["newSyncStateSetEpoch"]) == (0, "2")
        c0.sync_state_set_epoch = 2
        assert await route(namesrv_port) == {0: c0.addr, 2: c1.addr}
        before = await replica_info(leader)
        assert before == ({"masterBrokerId": "1", "masterAddress": c0.addr, "masterEpoch": "1"}, [1, 2], 2)

        # SIGKILL of the controller leader's process: a survivor leads, with every event etcd holds
        leader.kill()
        new_leader = await agreed_leader(followers, HANDOVER, "a surviving controller leads, known to the other")
        assert await replica_info(new_leader) == before
        next_id = await ask(new_leader.controller_port, Req.CONTROLLER_GET_NEXT_BROKER_ID, {
            "clusterName": "CtlCluster", "brokerName": GROUP_NAME})
        assert next_id is not None and next_id.ext["nextBrokerId"] == "3"

        if beat_every_controller:  # it heard their heartbeats as a follower: it knows both alive already
            assert await alive_ids(new_leader) == {1, 2}
        else:  # the brokers find the new leader and heartbeat there (the master first: no election meanwhile)
            await c0.follow(new_leader.controller_port)
            await wait_until(lambda: _has(alive_ids(new_leader), {1}), TIMEOUT, "the new leader sees the master")
            await c1.follow(new_leader.controller_port)
            await wait_until(lambda: _has(alive_ids(new_leader), {1, 2}), TIMEOUT, "the new leader sees both alive")
        assert await replica_info(new_leader) == before  # nobody elected just for the handover

        # the master broker dies: its connection to the new leader closes, the slave is elected and told
        c1.role_changed = pushed = defer.Deferred()
        await c0.kill()
        push = await pushed.addTimeout(TIMEOUT, reactor)
        assert push.ext == {"masterAddress": c1.addr, "masterBrokerId": "2", "masterEpoch": "2",
                            "syncStateSetEpoch": "3"}
        assert fastjson.loads(bytes(push.body)) == {"syncStateSet": [2], "syncStateSetEpoch": 3}
        await c1.register_as_role(namesrv_port)
        assert await route(namesrv_port) == {0: c1.addr}
        if beat_every_controller:  # its requests go to the leader it has now found
            await c1.follow(new_leader.controller_port)

        # the killed broker comes back with the id it kept: slave, and back in the sync-state set
        await c0.start_in_controller_mode(namesrv_port, new_leader.controller_port)
        assert (c0.controller_id, c0.master_id, c0.master_epoch, c0.is_master) == (1, 2, 2, False)
        assert await route(namesrv_port) == {0: c1.addr, 1: c0.addr}
        answer = await c1.alter_sync_state_set([1, 2])
        assert (answer.code, answer.ext["newSyncStateSetEpoch"]) == (0, "4")
        assert await replica_info(new_leader) == ({"masterBrokerId": "2", "masterAddress": c1.addr,
                                                   "masterEpoch": "2"}, [1, 2], 4)

        # the killed NameServer restarted with its address: a follower of the new leader, not its old self
        leader.start()
        assert await agreed_leader(nodes, START, "the restarted controller follows the new leader") is new_leader
        refused = await ask(leader.controller_port, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP_NAME})
        assert refused is not None and refused.code == 2007
    except BaseException:
        for node in nodes:
            sys.stderr.write(f"--- NameServer {node.peer_id} log (tail):\n{node.log_tail()}\n")
        raise
    finally:
        for node in nodes:  # first: nothing below may leave a process behind
            node.kill()
        await c0.kill()
        await c1.kill()


async def _has(ids, wanted: set[int]) -> bool:
    return wanted <= await ids
