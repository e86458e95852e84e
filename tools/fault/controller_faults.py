#!/usr/bin/env python3
"""Fault injection for the controller's high availability on etcd (issue 38, item 1).

Three NameServer processes (``python -m twisted_namesrv -c FILE``) whose embedded controllers are
peers on a three-member etcd cluster; controller-mode broker doubles (plain sockets, one thread
each) register, heartbeat every controller, ask for broker ids and elect; members of their groups
go silent and come back, so the controller fails their groups over.  Meanwhile, one at a time:

- ``kill9``: SIGKILL of the controller leader's NameServer, restarted once a successor leads;
- ``pause``: SIGSTOP of the leader for longer than its lease, then SIGCONT (a deposed leader
  that wakes up believing it leads: its writes must be fenced);
- ``etcd1``: one etcd member SIGKILLed and restarted (the quorum holds);
- ``etcd2``: two members SIGKILLed (no quorum: no leader may act) and restarted;
- ``cut``: the NameServer living in a network namespace of its own (veth pair, addresses made
  here) cut from etcd by iptables inside that namespace, then healed.

Every request and answer is recorded (times, controller asked, code, header fields, and the term
of that controller's leadership as its /api/controller said last), and /api/controller of every
node is sampled every 100 ms.  Afterwards the etcd log and the history of the leader key are read,
and ``check`` proves:

1. fenced: every event in the log was written inside some term (the leader key's lifetime), and
   every acknowledged write was answered by the controller whose address that term's key held:
   never two controllers applying in one term;
2. nothing acknowledged lost: every acknowledged broker id and every acknowledged election
   (group, master, masterEpoch) is in the log's replay;
3. a leader again within ``BOUND`` seconds after each fault heals (and how long after the fault
   began one led: the figures).

  .venv/bin/python tools/fault/controller_faults.py --rounds 2 --json /tmp/faults.json
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from twisted_namesrv.controller.codes import ControllerRequestCode as Req  # noqa: E402
from twisted_namesrv.controller.events import ApplyBrokerIdEvent, ElectMasterEvent, decode_event  # noqa: E402
from twisted_namesrv.controller.replicas import ReplicasInfoManager  # noqa: E402
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand  # noqa: E402
from twisted_namesrv.remoting.codes import V5_3_3  # noqa: E402

TTL = 2  # seconds: the controllers' etcd lease
BOUND = TTL * 3 + 6  # a leader again within this many seconds after a fault heals
KEY_PREFIX = "/faults/"
WRITES = {Req.CONTROLLER_APPLY_BROKER_ID, Req.CONTROLLER_ELECT_MASTER, Req.CONTROLLER_REGISTER_BROKER,
          Req.CONTROLLER_ALTER_SYNC_STATE_SET}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    with suppress(OSError):
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


# -- the network namespace ---------------------------------------------------------------------------

class Namespace:
    """A network namespace joined to the host by a veth pair: host side ``.1``, inside ``.2`` of a
    /24 of 10.239.x.0 no interface here uses.  ``cut`` drops TCP between it and the given host ports."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.name, self.host_if, self.inner_if = f"f1fault{tag}", f"vf1h{tag}", f"vf1n{tag}"
        used = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        octet = next(o for o in random.sample(range(10, 250), 240) if f"10.239.{o}." not in used)
        self.host_ip, self.inner_ip = f"10.239.{octet}.1", f"10.239.{octet}.2"
        self.cut_ports: list[int] = []

    def _ip(self, *args: str, inside: bool = False) -> None:
        prefix = ["ip", "netns", "exec", self.name] if inside else []
        subprocess.run([*prefix, *args], check=True, capture_output=True)

    def create(self) -> None:
        self._ip("ip", "netns", "add", self.name)
        self._ip("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.inner_if)
        self._ip("ip", "link", "set", self.inner_if, "netns", self.name)
        self._ip("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_if)
        self._ip("ip", "link", "set", self.host_if, "up")
        self._ip("ip", "addr", "add", f"{self.inner_ip}/24", "dev", self.inner_if, inside=True)
        self._ip("ip", "link", "set", self.inner_if, "up", inside=True)
        self._ip("ip", "link", "set", "lo", "up", inside=True)

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def _rules(self, action: str) -> None:
        ports = ",".join(map(str, self.cut_ports))
        self._ip("iptables", action, "OUTPUT", "-p", "tcp", "-d", self.host_ip, "-m", "multiport", "--dports", ports,
                 "-j", "DROP", inside=True)
        self._ip("iptables", action, "INPUT", "-p", "tcp", "-s", self.host_ip, "-m", "multiport", "--sports", ports,
                 "-j", "DROP", inside=True)

    def cut(self, ports: list[int]) -> None:
        self.cut_ports = ports
        self._rules("-A")

    def heal(self) -> None:
        self._rules("-D")

    def destroy(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def can_make_namespaces() -> str | None:
    """Why the ``cut`` fault cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


# -- etcd ----------------------------------------------------------------------------------------------

@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    argv: list[str]
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def etcd_cluster(workdir: Path, extra_host: str | None) -> list[EtcdMember]:
    binary = shutil.which("etcd")
    if binary is None:
        raise RuntimeError("etcd is not installed (apt-get install etcd-server)")
    ports: set[int] = set()
    while len(ports) < 6:
        ports.add(free_port())
    clients, peers = sorted(ports)[:3], sorted(ports)[3:]
    cluster = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(peers))
    members = []
    for i, (client, peer) in enumerate(zip(clients, peers, strict=True)):
        listen = f"http://127.0.0.1:{client}" + (f",http://{extra_host}:{client}" if extra_host else "")
        argv = [binary, "--name", f"m{i}", "--data-dir", str(workdir / f"etcd-m{i}"), "--listen-client-urls", listen,
                "--advertise-client-urls", f"http://127.0.0.1:{client}", "--listen-peer-urls",
                f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", cluster, "--initial-cluster-token", workdir.name, "--log-level", "error"]
        members.append(EtcdMember(f"m{i}", client, peer, workdir / f"etcd-m{i}", workdir / f"etcd-m{i}.log", argv))
    for member in members:
        member.start()
    deadline = time.monotonic() + 30
    while not etcd_answers(members[0].endpoint):
        if time.monotonic() > deadline:
            raise RuntimeError("etcd did not start: " + members[0].log_path.read_text(errors="replace")[-1500:])
        time.sleep(0.2)
    return members


def etcd_post(endpoint: str, path: str, body: dict, timeout: float = 3) -> dict:
    request = urllib.request.Request(f"{endpoint}/v3/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def etcd_answers(endpoint: str) -> bool:
    try:
        etcd_post(endpoint, "kv/range", {"key": "AA=="}, 2)
        return True
    except OSError:
        return False


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


def read_etcd(endpoints: list[str], group_prefix: bytes) -> dict[str, Any]:
    """The log's events with the revision each was written at, and the leader key's terms:
    create_revision -> (address, deleted at revision or None)."""
    endpoint = next(e for e in endpoints if etcd_answers(e))
    log_prefix = group_prefix + b"log/"
    answer = etcd_post(endpoint, "kv/range", {"key": b64(log_prefix), "range_end": b64(prefix_end(log_prefix))}, 30)
    events = sorted((int(kv["mod_revision"]), base64.b64decode(kv["value"])) for kv in answer.get("kvs", []))
    current = int(answer["header"]["revision"])
    leader_key = group_prefix + b"leader"
    terms: dict[int, list] = {}
    request = urllib.request.Request(f"{endpoint}/v3/watch", data=json.dumps({"create_request": {
        "key": b64(leader_key), "start_revision": "1"}}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=2) as stream, suppress(TimeoutError, OSError):
        while True:  # history first, then nothing: a quiet second ends it
            line = stream.readline()
            if not line:
                break
            for event in json.loads(line).get("result", {}).get("events", []):
                kv = event["kv"]
                if event.get("type", "PUT") == "PUT":
                    terms.setdefault(int(kv["create_revision"]), [base64.b64decode(kv.get("value", "")).decode(), None])
                else:
                    for span in terms.values():
                        if span[1] is None:
                            span[1] = int(kv["mod_revision"])
    return {"events": events, "terms": terms, "revision": current}


# -- the NameServers ----------------------------------------------------------------------------------

@dataclass
class Node:
    peer_id: str
    host: str
    namesrv_port: int
    controller_port: int
    http_port: int
    config: Path
    prefix: list[str] = field(default_factory=list)  # ip netns exec NAME, for the node in the namespace
    process: subprocess.Popen | None = None
    stopped: bool = False

    @property
    def controller_address(self) -> str:
        return f"{self.host}:{self.controller_port}"

    def start(self) -> None:
        with open(self.config.with_name("namesrv.log"), "ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "twisted_namesrv", "-c", str(self.config), "--data-dir",
                 str(self.config.with_name("data"))], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.stopped = False

    def signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(number)
        self.stopped = number == signal.SIGSTOP

    def kill(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGCONT)
                self.process.kill()
            self.process.wait(10)

    def status(self, timeout: float = 0.3) -> dict | None:
        try:
            url = f"http://{self.host}:{self.http_port}/api/controller"
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError, http.client.HTTPException):  # refused, timed out, cut mid-answer
            return None


def make_nodes(workdir: Path, endpoints: list[str], inner_endpoints: list[str] | None,
               namespace: Namespace | None, group: str, scan_ms: int) -> list[Node]:
    nodes = []
    for i in range(3):
        inside = namespace is not None and i == 2
        host = namespace.inner_ip if inside else "127.0.0.1"
        ports = set()
        while len(ports) < 3:
            ports.add(free_port())
        namesrv_port, controller_port, http_port = sorted(ports)
        home = workdir / f"n{i}"
        home.mkdir()
        nodes.append(Node(f"n{i}", host, namesrv_port, controller_port, http_port, home / "namesrv.conf",
                          namespace.exec_prefix() if inside else []))
    peers = ";".join(f"n{i}-{n.controller_address}" for i, n in enumerate(nodes))
    for node in nodes:
        etcd = inner_endpoints if node.prefix and inner_endpoints else endpoints
        node.config.write_text(
            f"listenPort={node.namesrv_port}\nbindAddress={node.host}\nmetricsPort={node.http_port}\n"
            f"metricsBindAddress={node.host}\nhttpOpenBeyondLoopback=true\nenableControllerInNamesrv=true\ncontrollerType=etcd\n"
            f"controllerEtcdEndpoints={','.join(etcd)}\ncontrollerEtcdKeyPrefix={KEY_PREFIX}\n"
            f"controllerEtcdLeaseTtlSeconds={TTL}\ncontrollerDLegerGroup={group}\ncontrollerDLegerPeers={peers}\n"
            f"controllerDLegerSelfId={node.peer_id}\nscanNotActiveBrokerInterval={scan_ms}\n"
            f"scanInactiveMasterInterval={scan_ms}\n")
        node.start()
    return nodes


# -- the history ------------------------------------------------------------------------------------

class History:
    """Every request and answer (and the 100 ms samples of each node's /api/controller), in memory
    and as JSON lines."""

    def __init__(self, path: Path) -> None:
        self.lock = threading.Lock()
        self.records: list[dict] = []
        self.samples: list[dict] = []
        self.faults: list[dict] = []
        self.terms: dict[str, int | None] = {}  # controller address -> its last sampled term
        self.path = path

    def add(self, record: dict) -> None:
        with self.lock:
            record["term"] = self.terms.get(record["controller"])
            self.records.append(record)

    def sample(self, t: float, node: Node, status: dict | None) -> None:
        with self.lock:
            self.samples.append({"t": t, "node": node.controller_address, "leader": bool(status and status["leader"]),
                                 "term": status.get("term") if status else None, "up": status is not None})
            if status is not None:
                self.terms[node.controller_address] = status.get("term")

    def save(self) -> None:
        with open(self.path, "w") as out:
            for record in self.records:
                out.write(json.dumps({"kind": "request", **record}) + "\n")
            for sample in self.samples:
                out.write(json.dumps({"kind": "sample", **sample}) + "\n")
            for fault in self.faults:
                out.write(json.dumps({"kind": "fault", **fault}) + "\n")


class Link:
    """A blocking remoting connection to one controller; ``call`` records its request and answer."""

    def __init__(self, address: str, history: History, who: str) -> None:
        host, _, port = address.rpartition(":")
        self.address, self.history, self.who = address, history, who
        self.sock = socket.create_connection((host, int(port)), timeout=2)
        self.sock.settimeout(3)
        self.decoder = FrameDecoder()
        self.opaque = 0

    def close(self) -> None:
        with suppress(OSError):
            self.sock.close()

    def send_oneway(self, code: int, ext: dict) -> None:
        self.opaque += 1
        self.sock.sendall(RemotingCommand.request(code, ext, opaque=self.opaque, version=V5_3_3, oneway=True).encode())

    def call(self, code: int, ext: dict | None = None, body: bytes | None = None) -> RemotingCommand | None:
        self.opaque += 1
        opaque = self.opaque
        record = {"who": self.who, "controller": self.address, "code": int(code), "ext": ext or {},
                  "sent": time.time()}
        answer = None
        try:
            self.sock.sendall(RemotingCommand.request(code, ext or {}, body, opaque=opaque, version=V5_3_3).encode())
            while answer is None:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("closed")
                for frame in self.decoder.feed(data):
                    command = RemotingCommand.decode(frame)
                    if command.is_response and command.opaque == opaque:
                        answer = command
        except (OSError, ConnectionError) as exc:
            record.update(answered=time.time(), error=type(exc).__name__)
            self.history.add(record)
            raise
        record.update(answered=time.time(), answer=int(answer.code), remark=answer.remark,
                      answer_ext=dict(answer.ext or {}))
        self.history.add(record)
        return answer


# -- the broker doubles ------------------------------------------------------------------------------

def find_leader(nodes: list[Node], history: History, who: str, rng: random.Random) -> Link:
    """A connection to the controller that says (1005) it leads."""
    for node in rng.sample(nodes, len(nodes)):
        if node.stopped:
            continue
        try:
            link = Link(node.controller_address, history, who)
            meta = link.call(Req.CONTROLLER_GET_METADATA_INFO)
        except (OSError, ConnectionError):
            continue
        if meta is not None and meta.ext.get("isLeader") == "true":
            return link
        link.close()
    raise ConnectionError("no leader answers")


class BrokerDouble(threading.Thread):
    """One controller-mode broker: find the leader, get an id, register, elect when there is no
    master, heartbeat every controller each second; now and then go silent for a while (its group
    fails over) and come back."""

    def __init__(self, group: str, index: int, nodes: list[Node], history: History, stop: threading.Event,
                 rng: random.Random) -> None:
        super().__init__(daemon=True, name=f"{group}-{index}")
        self.group, self.index, self.nodes, self.history, self.stop_event = group, index, nodes, history, stop
        self.rng = rng
        self.address = f"127.0.0.1:{20000 + 10 * int(group.rpartition('f')[2]) + index}"  # only named
        self.beats: dict[str, socket.socket] = {}  # controller address -> the heartbeat connection
        self.broker_id: int | None = None
        self.link: Link | None = None
        self.silent_until = 0.0
        self.errors = 0

    def leader_link(self) -> Link:
        if self.link is None:
            self.link = find_leader(self.nodes, self.history, self.name, self.rng)
        return self.link

    def drop(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None

    def ids(self) -> dict:
        return {"clusterName": "FaultCluster", "brokerName": self.group}

    def join_group(self) -> None:
        link = self.leader_link()
        if self.broker_id is None:
            answer = link.call(Req.CONTROLLER_GET_NEXT_BROKER_ID, self.ids())
            wanted = int(answer.ext["nextBrokerId"])
            check = f"{self.address};{time.time_ns()}"
            applied = link.call(Req.CONTROLLER_APPLY_BROKER_ID, {**self.ids(), "appliedBrokerId": str(wanted),
                                                                "registerCheckCode": check})
            if applied.code != 0:
                raise ConnectionError(f"apply {applied.code}")
            self.broker_id = wanted
        registered = link.call(Req.CONTROLLER_REGISTER_BROKER, {**self.ids(), "brokerId": str(self.broker_id),
                                                                 "brokerAddress": self.address})
        if registered.code != 0:
            raise ConnectionError(f"register {registered.code}")
        self.beat()
        if "masterBrokerId" not in registered.ext:
            link.call(Req.CONTROLLER_ELECT_MASTER, {**self.ids(), "brokerId": str(self.broker_id),
                                                    "designateElect": "false"})

    def beat(self) -> None:
        ext = {**self.ids(), "brokerAddr": self.address, "brokerId": str(self.broker_id),
               "heartbeatTimeoutMills": "3000", "epoch": "0", "maxOffset": "0", "confirmOffset": "0",
               "electionPriority": "0"}
        frame = RemotingCommand.request(Req.BROKER_HEARTBEAT, ext, opaque=1, version=V5_3_3, oneway=True).encode()
        for node in self.nodes:  # as ReplicasManager: every controller hears it, each on a connection kept open
            address = node.controller_address
            if node.stopped:
                continue
            try:
                if self.link is not None and self.link.address == address:
                    self.link.send_oneway(Req.BROKER_HEARTBEAT, ext)
                    continue
                if address not in self.beats:
                    host, _, port = address.rpartition(":")
                    self.beats[address] = socket.create_connection((host, int(port)), timeout=0.5)
                self.beats[address].sendall(frame)
            except OSError:
                with suppress(OSError, KeyError):
                    self.beats.pop(address).close()

    def drop_beats(self) -> None:
        for sock in self.beats.values():
            with suppress(OSError):
                sock.close()
        self.beats.clear()

    def run(self) -> None:
        joined = False
        while not self.stop_event.is_set():
            now = time.monotonic()
            if now < self.silent_until:
                time.sleep(0.2)
                continue
            try:
                if not joined:
                    self.join_group()
                    joined = True
                self.beat()
                if self.rng.random() < 0.03:  # go silent: the controller elects another master
                    self.drop()
                    self.drop_beats()
                    self.silent_until = now + self.rng.uniform(4, 7)
                    joined = False
                    continue
                if self.rng.random() < 0.2:
                    self.leader_link().call(Req.CONTROLLER_ELECT_MASTER, {**self.ids(), "brokerId": str(
                        self.broker_id), "designateElect": "false"})
            except Exception:  # noqa: BLE001 - a broker that trips retries, as a real one does
                self.errors += 1
                self.drop()
                joined = False
            time.sleep(0.5)


class IdApplier(threading.Thread):
    """New members keep joining a group: next broker id, then apply it (acknowledged ids pile up
    through every fault)."""

    def __init__(self, group: str, nodes: list[Node], history: History, stop: threading.Event,
                 rng: random.Random) -> None:
        super().__init__(daemon=True, name=f"{group}-ids")
        self.group, self.nodes, self.history, self.stop_event, self.rng = group, nodes, history, stop, rng
        self.link: Link | None = None

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            try:
                if self.link is None:
                    self.link = find_leader(self.nodes, self.history, self.name, self.rng)
                ids = {"clusterName": "FaultCluster", "brokerName": self.group}
                answer = self.link.call(Req.CONTROLLER_GET_NEXT_BROKER_ID, ids)
                n += 1
                if answer.code == 0:
                    self.link.call(Req.CONTROLLER_APPLY_BROKER_ID, {
                        **ids, "appliedBrokerId": answer.ext["nextBrokerId"],
                        "registerCheckCode": f"127.0.0.9:{n};{time.time_ns()}"})
            except Exception:  # noqa: BLE001 - retried at the next leader
                if self.link is not None:
                    self.link.close()
                self.link = None
            time.sleep(0.2)


def sampler(nodes: list[Node], history: History, stop: threading.Event) -> None:
    while not stop.is_set():
        for node in nodes:
            status = None if node.stopped else node.status()
            history.sample(time.time(), node, status)
        time.sleep(0.1)


# -- the faults --------------------------------------------------------------------------------------

def current_leader(nodes: list[Node], timeout: float = 30) -> Node | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in nodes:
            status = None if node.stopped else node.status()
            if status and status.get("leader"):
                return node
        time.sleep(0.1)
    return None


@contextmanager
def fault(history: History, name: str, detail: str, leader: Node | None) -> Iterator[dict]:
    status = leader.status() if leader is not None else None
    entry = {"fault": name, "detail": detail, "began": time.time(),
             "leader_before": [leader.controller_address, status.get("term")] if leader and status else None}
    try:
        yield entry
    finally:
        entry.setdefault("healed", time.time())
        history.faults.append(entry)


def inject(kind: str, nodes: list[Node], members: list[EtcdMember], namespace: Namespace | None,
           history: History, rng: random.Random) -> None:
    leader = current_leader(nodes)
    if kind == "kill9":
        if leader is None:
            return
        with fault(history, kind, leader.peer_id, leader) as entry:
            leader.kill()
            entry["healed"] = entry["began"]  # nothing to heal: the others take over on their own
            current_leader([n for n in nodes if n is not leader], BOUND)
            leader.start()
    elif kind == "pause":
        if leader is None:
            return
        with fault(history, kind, leader.peer_id, leader) as entry:
            leader.signal(signal.SIGSTOP)
            time.sleep(TTL * 2 + 1)
            entry["healed"] = time.time()
            leader.signal(signal.SIGCONT)
    elif kind in ("etcd1", "etcd2"):
        lost = rng.sample(members, 1 if kind == "etcd1" else 2)
        with fault(history, kind, ",".join(m.name for m in lost), leader) as entry:
            for member in lost:
                member.kill()
            time.sleep(TTL * 2 + 1)
            entry["healed"] = time.time()
            for member in lost:
                member.start()
    elif kind == "cut" and namespace is not None:
        inner = nodes[2]
        with fault(history, kind, f"{inner.peer_id} (leader: {leader.peer_id if leader else None})", leader) as entry:
            namespace.cut([m.client_port for m in members])
            time.sleep(TTL * 2 + 1)
            entry["healed"] = time.time()
            namespace.heal()
    current_leader(nodes, BOUND)  # traffic goes on until a leader is back (the checker measures when), and a bit
    time.sleep(2)


# -- the checker -------------------------------------------------------------------------------------

def term_at(terms: dict[int, list], revision: int) -> int | None:
    """The term whose leader key existed at ``revision``."""
    for term, (_address, deleted) in terms.items():
        if term <= revision and (deleted is None or revision < deleted):
            return term
    return None


def check(history: History, etcd: dict[str, Any], bound: float = BOUND) -> dict[str, Any]:
    violations: list[str] = []
    terms = etcd["terms"]
    replicas = ReplicasInfoManager()
    epochs: dict[tuple[str, int, int], int] = {}  # (group, master, masterEpoch) the log elected -> revision
    applied: dict[tuple[str, int], tuple[str, int]] = {}  # (group, id) -> (registerCheckCode, revision)
    event_terms: dict[int, int] = {}  # revision -> term
    for revision, data in etcd["events"]:
        term = term_at(terms, revision)
        if term is None:
            violations.append(f"event at revision {revision} written outside any term (no leader key)")
        else:
            event_terms[revision] = term
        event = decode_event(data)
        replicas.apply_event(event)
        if isinstance(event, ElectMasterEvent) and event.newMasterElected:
            info = replicas.sync_state_set_info_table[event.brokerName]
            epochs[event.brokerName, int(event.newMasterBrokerId or 0), info.master_epoch] = revision
        if isinstance(event, ApplyBrokerIdEvent):
            applied[event.brokerName, event.newBrokerId] = (event.registerCheckCode, revision)
    # acknowledged writes: answered SUCCESS by whom, in which term
    acked_ids = acked_elections = fenced_checked = 0
    terms_by_address: dict[int, set[str]] = {}
    for record in history.records:
        if record.get("answer") != 0 or record["code"] not in WRITES:
            continue
        if record["term"] is not None:
            terms_by_address.setdefault(record["term"], set()).add(record["controller"])
        revision = None
        if record["code"] == Req.CONTROLLER_APPLY_BROKER_ID:
            acked_ids += 1
            key = (record["ext"]["brokerName"], int(record["ext"]["appliedBrokerId"]))
            check_code, revision = applied.get(key, (None, None))
            if check_code != record["ext"]["registerCheckCode"]:
                violations.append(f"acknowledged broker id {key} lost (log has {check_code!r})")
                revision = None
        elif record["code"] == Req.CONTROLLER_ELECT_MASTER:
            acked_elections += 1
            ext = record["answer_ext"]
            elected = (record["ext"]["brokerName"], int(ext["masterBrokerId"]), int(ext["masterEpoch"]))
            revision = epochs.get(elected)
            if revision is None:
                violations.append(f"acknowledged election {elected} is not in the log")
        if revision is not None:  # fenced: the event's term is the answering controller's
            term = event_terms.get(revision)
            if term is None or terms[term][0] != record["controller"]:
                holder = terms[term][0] if term is not None else None
                violations.append(f"{record['who']}'s acknowledged write at revision {revision} answered by "
                                  f"{record['controller']}, but term {term} was {holder}'s")
            else:
                fenced_checked += 1
    for term, addresses in terms_by_address.items():
        if len(addresses) > 1:
            violations.append(f"term {term}: writes acknowledged by {sorted(addresses)}")
        elif term in terms and terms[term][0] not in addresses:
            violations.append(f"term {term} belongs to {terms[term][0]} but {sorted(addresses)} acknowledged in it")
    # leaders: one per term; again within the bound after each heal
    leaders_per_term: dict[int, set[str]] = {}
    for sample in history.samples:
        if sample["leader"] and sample["term"] is not None:
            leaders_per_term.setdefault(sample["term"], set()).add(sample["node"])
    for term, addresses in leaders_per_term.items():
        if len(addresses) > 1:
            violations.append(f"term {term} claimed by {sorted(addresses)}")
    figures = []
    for entry in history.faults:
        window = [s for s in history.samples if entry["began"] <= s["t"] <= entry["healed"] + bound]
        leads = [s for s in window if s["leader"]]
        new = [s for s in leads if (s["node"], s["term"]) != tuple(entry["leader_before"] or (None, None))]
        after_heal = [s["t"] for s in leads if s["t"] >= entry["healed"]]
        lead_times = sorted({round(s["t"], 3) for s in leads})
        gaps = [b - a for a, b in zip([entry["began"], *lead_times], lead_times, strict=False)]
        first_after_heal = min(after_heal) - entry["healed"] if after_heal else None
        figures.append({"fault": entry["fault"], "detail": entry["detail"],
                        "lasted_s": round(entry["healed"] - entry["began"], 2),
                        "leader_before": entry["leader_before"],
                        "new_leader": [new[0]["node"], new[0]["term"]] if new else None,
                        "new_leader_after_s": round(new[0]["t"] - entry["began"], 2) if new else None,
                        "longest_leaderless_s": round(max(gaps), 2) if gaps else None,
                        "leader_after_heal_s": None if first_after_heal is None else round(first_after_heal, 2)})
        if first_after_heal is None or first_after_heal > bound:
            violations.append(f"{entry['fault']} ({entry['detail']}): no leader within {bound} s of the heal")
    return {"verdict": "PASS" if not violations else "FAIL", "violations": violations[:50],
            "history_records": len(history.records), "samples": len(history.samples),
            "log_events": len(etcd["events"]), "terms": len(terms), "acked_broker_ids": acked_ids,
            "acked_elections": acked_elections, "acked_writes_matched_to_their_term": fenced_checked,
            "acked_writes": sum(1 for r in history.records if r.get("answer") == 0 and r["code"] in WRITES),
            "faults": figures}


# -- the run -----------------------------------------------------------------------------------------

def run(faults: list[str], workdir: Path, seed: int = 38, groups: int = 3, settle: float = 4,
        use_namespace: bool = True) -> dict[str, Any]:
    rng = random.Random(seed)
    namespace = None
    why_not = can_make_namespaces() if use_namespace else "not asked for"
    if "cut" in faults and why_not is None:
        namespace = Namespace()
        namespace.create()
    elif "cut" in faults:
        faults = [f for f in faults if f != "cut"]
    members: list[EtcdMember] = []
    nodes: list[Node] = []
    stop = threading.Event()
    history = History(workdir / "history.jsonl")
    try:
        members = etcd_cluster(workdir, namespace.host_ip if namespace else None)
        endpoints = [m.endpoint for m in members]
        inner = [f"http://{namespace.host_ip}:{m.client_port}" for m in members] if namespace else None
        group = f"g{uuid.uuid4().hex[:8]}"
        nodes = make_nodes(workdir, endpoints, inner, namespace, group, 1000)
        if current_leader(nodes, 40) is None:
            raise RuntimeError("no controller leads: " + nodes[0].config.with_name("namesrv.log").read_text()[-2000:])
        threads: list[threading.Thread] = [threading.Thread(target=sampler, args=(nodes, history, stop), daemon=True)]
        for g in range(groups):
            name = f"broker-f{g}"
            threads += [BrokerDouble(name, i, nodes, history, stop, random.Random(rng.random())) for i in range(2)]
            threads.append(IdApplier(name, nodes, history, stop, random.Random(rng.random())))
        for thread in threads:
            thread.start()
        time.sleep(settle)
        for kind in faults:
            inject(kind, nodes, members, namespace, history, rng)
        stop.set()
        for thread in threads:
            thread.join(10)
        for member in members:  # every member back before reading
            if member.process is None or member.process.poll() is not None:
                member.start()
        time.sleep(1)
        from twisted_namesrv.controller.etcd import group_prefix
        etcd = read_etcd(endpoints, group_prefix(KEY_PREFIX, group))
        history.save()
        result = check(history, etcd)
        result["skipped"] = {"cut": why_not} if why_not and use_namespace else {}
        result["history_path"] = str(history.path)
        return result
    finally:
        stop.set()
        for node in nodes:
            node.kill()
        for member in members:
            member.kill()
        if namespace is not None:
            namespace.destroy()


ALL = ["kill9", "pause", "etcd1", "cut", "etcd2"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="times through every fault")
    parser.add_argument("--faults", default=",".join(ALL), help=f"comma-separated, of {','.join(ALL)}")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--workdir", help="keep history, configs and logs here (default: a temp dir, removed)")
    parser.add_argument("--json", help="write the verdict here")
    args = parser.parse_args()
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="namesrv-faults-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = run(args.faults.split(",") * args.rounds, workdir, args.seed)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if result["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
