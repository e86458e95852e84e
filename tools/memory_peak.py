#!/usr/bin/env python3
"""Peak memory of a NameServer under unauthenticated attacks, each on a fresh server:

  stall    PEERS connections each send all but the last byte of one frame of frameMaxLength and stall
  bomb     one REGISTER_BROKER whose compressed body inflates to BOMB_MIB MiB (zeros)
  behind   BEHIND_PEERS connections each send one REGISTER_BROKER answered in steps (a compressed
           table of BEHIND_TOPICS topics, each broker's decoded in full, one after the other), then
           1 MiB oneway frames behind it for BEHIND_SECONDS, as fast as the server takes them
  queue    one such registration, then PEERS connections each sending one whole REGISTER_BROKER
           frame of frameMaxLength (a plain JSON table) that waits its turn behind it, 12 at once
           (their unfinished frames together within the default budget), one wave after the other
  unread   one topic on UNREAD_GROUPS broker groups, then UNREAD_PEERS connections each sending
           UNREAD_LOOKUPS pipelined lookups of it (0: 64 KiB of them) and reading nothing
  amplify  AMPLIFY_BROKERS REGISTER_BROKERs on one connection, each a compressed table of
           AMPLIFY_TOPICS topics of its own under a broker name of its own, one after the other
  http     HTTP_GROUPS broker groups whose cluster and broker names are HTTP_NAME characters long,
           then HTTP_PEERS connections to the metrics port each asking GET /metrics and reading nothing
  kept     one topic on KEPT_GROUPS broker groups, then KEPT_LOOKUPS lookups of it on one connection
           that differ by one field padded to KEPT_PAD characters, each sent twice (the second is
           answered from what the server kept of the first), 50 at a time, every answer read
  lists    LISTS_CLUSTERS broker groups, each a cluster of its own, serving the same LISTS_TOPICS
           topics named in LISTS_NAME characters, then GET_TOPICS_BY_CLUSTER of each cluster, read
  routes   ROUTES_GROUPS broker groups serving the same ROUTES_TOPICS topics, then one lookup of each
           topic as a 4.9.8 client asks and one as a 4.3 client does, 50 at a time, every answer read
           (give serverChannelMaxIdleTimeSeconds=3600 with --config when the lookups outlast 120 s:
           the groups' connection is idle meanwhile)
  clusterinfo  CLUSTERINFO_GROUPS broker groups of CLUSTERINFO_MEMBERS brokers, each group a cluster
           of its own, every name and address CLUSTERINFO_NAME characters (the defaults: the largest
           table the default limits allow), then one GET_BROKER_CLUSTER_INFO, read

usage: tools/memory_peak.py [--attacks stall,bomb] [--budget BYTES] [--config KEY=VALUE ...]
                            [--peers 40] [--bomb-mib 300] [--behind-topics 1000000]
                            [--behind-seconds 8] [--behind-peers 20] [--amplify-brokers 8] [--amplify-topics 200000]
                            [--unread-groups 2000] [--unread-peers 4] [--unread-lookups 0]
                            [--http-groups 5000] [--http-name 400] [--http-peers 128]
                            [--kept-groups 4] [--kept-lookups 2000] [--kept-pad 0]
                            [--lists-clusters 200] [--lists-topics 2000] [--lists-name 500]
                            [--routes-groups 500] [--routes-topics 2000]
                            [--clusterinfo-groups 20000] [--clusterinfo-members 5] [--clusterinfo-name 512]
                            [--src DIR]

``--src`` runs the server from another checkout (an older commit: before/after figures);
``--budget`` writes receiveMemoryBudget into the server's -c file (0: the key left out), and
``--config`` any other key. Prints one JSON object: the server's resident memory (VmRSS) at start
and its peak (VmHWM) after each attack, in MB, and what the server did to the attacker (peers
closed, bytes it took, answers).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

FRAME_MAX = 16 * 1024 * 1024
QUEUE_WAVE = 12  # queue's peers send at once, one wave after the other


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    raise KeyError(field)


class Server:
    def __init__(self, src: Path, budget: int, config: list[str] | None = None) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.port, self.metrics_port = free_port(), free_port()
        conf = Path(self.dir.name) / "namesrv.properties"
        lines = ([f"receiveMemoryBudget={budget}"] if budget else []) + [f"metricsPort={self.metrics_port}"]
        lines += list(config or [])
        conf.write_text("".join(line + "\n" for line in lines))
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "twisted_namesrv", "--port", str(self.port), "--data-dir", self.dir.name,
             "-c", str(conf), "--log-level", "error"], env=env, cwd=self.dir.name, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        self.start_mb = status_mb(self.process.pid, "VmRSS")

    def peak_mb(self) -> float:
        return status_mb(self.process.pid, "VmHWM")

    def rss_mb(self) -> float:
        return status_mb(self.process.pid, "VmRSS")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)  # a server holding millions of entries takes a while to let them go
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.dir.cleanup()


def stall(server: Server, peers: int) -> dict[str, object]:
    length = FRAME_MAX - 4  # the largest frame frameMaxLength accepts (its prefix included)
    header = b"{}"
    sent = struct.pack(">iI", length, len(header)) + header + bytes(length - 4 - len(header) - 1)
    sockets = []
    for _ in range(peers):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sockets.append(sock)
    view = memoryview(sent)
    for sock in sockets:
        try:
            sock.sendall(view)
        except OSError:
            pass  # closed by the server for the budget: expected with one
    time.sleep(3)
    open_left = still_open(sockets)
    return {"peak_mb": server.peak_mb(), "peers": peers, "peers_still_open": open_left}


def still_open(sockets: list[socket.socket]) -> int:
    """How many of ``sockets`` the server has not closed; all closed here."""
    open_left = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            open_left += sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            open_left += 1
        except OSError:
            pass
        sock.close()
    return open_left


def bomb(server: Server, mib: int, src: Path) -> dict[str, object]:
    sys.path.insert(0, str(src))
    from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode
    from twisted_namesrv.remoting.codes import V5_3_3

    body = zlib.compress(bytes(mib * 1024 * 1024), 9)
    ext = {"clusterName": "c", "brokerAddr": "127.0.0.1:10911", "brokerName": "b", "brokerId": "0",
           "compressed": "true", "bodyCrc32": "0"}
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=1, version=V5_3_3)
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
        sock.sendall(request.encode())
        decoder, frames = FrameDecoder(), []
        while not frames:
            data = sock.recv(65536)
            if not data:
                break
            frames = decoder.feed(data)
    answer = RemotingCommand.decode(frames[0]) if frames else None
    return {"peak_mb": server.peak_mb(), "inflates_to_mib": mib, "compressed_kib": len(body) // 1024,
            "answer": None if answer is None else f"{answer.code} {answer.remark}"}


def codec(src: Path):  # the server's codec, from the checkout under test
    sys.path.insert(0, str(src))
    from twisted_namesrv import remoting
    from twisted_namesrv.remoting import codes

    return remoting, codes


def compressed_table(names: list[str]) -> bytes:
    """A REGISTER_BROKER body in the 4.9.8 compressed layout (RegisterBrokerBody.encode(true))."""
    def chunk(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    parts = [chunk(b'{"counter":1,"timestamp":1}'), struct.pack(">i", len(names))]
    parts += [chunk(f"{name} 8 8 6 SINGLE_TAG".encode()) for name in names]
    parts.append(chunk(b"[]"))
    return zlib.compress(b"".join(parts), 9)


def register(src: Path, body: bytes, broker: str, opaque: int, compressed: bool = True) -> bytes:
    remoting, codes = codec(src)
    ext = {"clusterName": "attack", "brokerAddr": f"127.0.0.1:{10000 + opaque}", "brokerName": broker,
           "brokerId": "0", "compressed": str(compressed).lower(), "bodyCrc32": "0",
           "heartbeatTimeoutMillis": "3600000"}  # (5.x honours it) an attack that lasts minutes keeps its brokers
    return remoting.RemotingCommand.request(remoting.RequestCode.REGISTER_BROKER, ext, body, opaque=opaque,
                                            version=codes.V4_9_8).encode()


def answers(sock: socket.socket, src: Path, count: int) -> list[str]:
    """The code and remark of the next ``count`` answers on ``sock`` (fewer if it closes)."""
    remoting, _ = codec(src)
    decoder, frames = remoting.FrameDecoder(), []
    while len(frames) < count:
        try:
            data = sock.recv(1 << 20)
        except OSError:
            break
        if not data:
            break
        frames += decoder.feed(data)
    decoded = [remoting.RemotingCommand.decode(frame) for frame in frames]
    return [f"{answer.code} {(answer.remark or '')[:160]}" for answer in decoded]


def plain_table(size: int) -> bytes:
    """A plain JSON REGISTER_BROKER body of at most ``size`` bytes, as many topics as fit."""
    entry = '"queued{0:07d}":{{"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",' \
            '"topicName":"queued{0:07d}","topicSysFlag":0,"writeQueueNums":8}}'
    count = (size - 200) // (len(entry.format(0)) + 1)
    table = ",".join(entry.format(j) for j in range(count))
    return ('{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1},'
            '"topicConfigTable":{' + table + '}}}').encode()


def plain_table_of(names: list[str]) -> bytes:
    """A plain JSON REGISTER_BROKER body listing ``names``."""
    table = {name: {"topicName": name, "readQueueNums": 8, "writeQueueNums": 8, "perm": 6} for name in names}
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 1}, "topicConfigTable": table}}).encode()


def oneway_frame(size: int, opaque: int) -> bytes:
    """A oneway request of an unknown code, ``size`` bytes with its prefix: answered with nothing."""
    header = json.dumps({"code": 31999, "flag": 2, "language": "JAVA", "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 0}).encode()
    return struct.pack(">ii", size - 4, len(header)) + header + bytes(size - 8 - len(header))


def send_all(sockets: list[socket.socket], data: bytes, server: Server) -> float:
    """Send ``data`` once on each of ``sockets``, all at once (one write each as it takes more);
    the server's highest RSS meanwhile (sampled)."""
    for sock in sockets:
        sock.setblocking(False)
    view, at, highest = memoryview(data), dict.fromkeys(sockets, 0), 0.0
    next_sample = time.monotonic()
    while at:
        if (now := time.monotonic()) >= next_sample:
            highest, next_sample = max(highest, server.rss_mb()), now + 0.2
        _, writable, _ = select.select([], list(at), [], 0.05)
        for sock in writable:
            try:
                at[sock] += sock.send(view[at[sock]:])
            except BlockingIOError:
                continue
            except OSError:
                at[sock] = len(data)  # closed by the server (for the budget)
            if at[sock] >= len(data):
                del at[sock]
    for sock in sockets:
        sock.setblocking(True)
    return max(highest, server.rss_mb())


def flood(sockets: list[socket.socket], data: bytes, seconds: float, server: Server) -> dict[str, object]:
    """Send ``data`` over and over on each of ``sockets`` for ``seconds``, as fast as the server
    takes it; the bytes it took, its highest RSS meanwhile (sampled), and how many it closed."""
    for sock in sockets:
        sock.setblocking(False)
    view, at = memoryview(data), dict.fromkeys(sockets, 0)
    sent, highest, closed = 0, 0.0, 0
    deadline = next_sample = time.monotonic()
    deadline += seconds
    while at and (now := time.monotonic()) < deadline:
        if now >= next_sample:
            highest, next_sample = max(highest, server.rss_mb()), now + 0.2
        _, writable, _ = select.select([], list(at), [], 0.05)
        for sock in writable:
            try:
                done = sock.send(view[at[sock]:])
            except BlockingIOError:
                continue
            except OSError:
                closed += 1
                del at[sock]
                continue
            sent += done
            at[sock] = (at[sock] + done) % len(data)
    for sock in sockets:
        sock.setblocking(True)
    return {"taken_mb": round(sent / 1e6, 1), "rss_highest_mb": max(highest, server.rss_mb()),
            "closed_by_server": closed}


def behind(server: Server, peers: int, topics: int, seconds: float, src: Path) -> dict[str, object]:
    """Each connection's registration runs for a second or more, one after the other; all send
    frames behind their own meanwhile."""
    sockets = [socket.create_connection(("127.0.0.1", server.port), timeout=120) for _ in range(peers)]
    body = compressed_table([f"behind{j:07d}" for j in range(topics)])
    for index, sock in enumerate(sockets):  # each from an address of its own: decoded in full, one after the other
        sock.sendall(register(src, body, "behind", index + 1))
    result = flood(sockets, oneway_frame(1 << 20, 2), seconds, server)
    sockets[0].settimeout(120)
    first = answers(sockets[0], src, 1)
    for sock in sockets:
        sock.close()
    return {"peak_mb": server.peak_mb(), "peers": peers, "topics": topics, "seconds": seconds, **result,
            "registration_answer": first[0] if first else None}


def queue(server: Server, peers: int, topics: int, src: Path) -> dict[str, object]:
    first = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    first.sendall(register(src, compressed_table([f"behind{j:07d}" for j in range(topics)]), "behind", 1))
    time.sleep(0.5)
    queued = register(src, plain_table(FRAME_MAX - 4096), "queued", 2, compressed=False)  # a second's decoding
    sockets = []
    for _ in range(peers):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sockets.append(sock)
    highest = 0.0
    for wave in range(0, peers, QUEUE_WAVE):  # a wave's unfinished frames fit the budget together
        highest = max(highest, send_all(sockets[wave:wave + QUEUE_WAVE], queued, server))
    time.sleep(1)
    highest = max(highest, server.rss_mb())
    open_left = still_open(sockets)
    first.close()
    return {"peak_mb": server.peak_mb(), "rss_highest_mb": highest, "peers": peers,
            "frame_mb": round(len(queued) / 1e6, 1), "peers_still_open": open_left}


def unread(server: Server, groups: int, peers: int, lookups: int, src: Path) -> dict[str, object]:
    """One topic on ``groups`` broker groups (a route answer of about 200 bytes a group), then
    ``peers`` connections each sending ``lookups`` pipelined lookups of it (0: 64 KiB of them) and
    reading nothing, as peers whose network went would (half-open)."""
    remoting, codes = codec(src)
    body = plain_table_of(["unread", "unread-too"])  # 5.x refuses a first registration of one topic
    brokers = socket.create_connection(("127.0.0.1", server.port), timeout=120)  # open: its brokers stay
    brokers.sendall(b"".join(register(src, body, f"unread{g:05d}", g + 1, compressed=False) for g in range(groups)))
    got = answers(brokers, src, groups)
    lookup = remoting.RemotingCommand.request(remoting.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "unread"},
                                              opaque=1000, version=codes.V4_9_8).encode()
    sockets = [socket.create_connection(("127.0.0.1", server.port), timeout=120) for _ in range(peers)]
    for sock in sockets:  # the first lookup read, so the next are answered from memory
        sock.sendall(lookup)
        answers(sock, src, 1)
    started = server.rss_mb()
    lookups = lookups or 65536 // len(lookup)
    for sock in sockets:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the least the kernel holds for them
    highest = send_all(sockets, lookup * lookups, server)
    for _ in range(10):  # the server works through every peer's first read
        time.sleep(1)
        highest = max(highest, server.rss_mb())
    for sock in [*sockets, brokers]:
        sock.close()
    return {"peak_mb": server.peak_mb(), "rss_before_lookups_mb": started, "rss_highest_mb": highest,
            "groups": groups, "registered": sum(answer.startswith("0 ") for answer in got), "peers": peers,
            "lookups_each": lookups}


def amplify(server: Server, brokers: int, topics: int, src: Path) -> dict[str, object]:
    sent, codes = 0, []
    with socket.create_connection(("127.0.0.1", server.port), timeout=600) as sock:
        for i in range(brokers):
            frame = register(src, compressed_table([f"amp{i:03d}_{j:07d}" for j in range(topics)]), f"amp{i:03d}",
                             i + 1)
            sent += len(frame)
            sock.sendall(frame)
            codes += answers(sock, src, 1)
    time.sleep(1)
    return {"peak_mb": server.peak_mb(), "rss_after_mb": server.rss_mb(), "brokers": brokers,
            "topics_each": topics, "compressed_mb": round(sent / 1e6, 2),
            "answers": sorted({code: codes.count(code) for code in codes}.items())}


def http(server: Server, groups: int, name: int, peers: int, src: Path) -> dict[str, object]:
    """Broker groups with long names (the /metrics answer grows with them), then ``peers``
    connections asking /metrics and reading nothing, as a slow or stalled scraper would."""
    remoting, codes = codec(src)
    body = plain_table_of(["http1", "http2"])
    registered = 0
    brokers = socket.create_connection(("127.0.0.1", server.port), timeout=600)  # open: its brokers stay
    for start in range(0, groups, 500):
        batch = range(start, min(groups, start + 500))
        brokers.sendall(b"".join(remoting.RemotingCommand.request(remoting.RequestCode.REGISTER_BROKER, {
            "clusterName": "c" * name, "brokerAddr": f"127.0.{g // 250}.{g % 250}:10911",
            "brokerName": f"{g:06d}" + "b" * (name - 6), "brokerId": "0", "compressed": "false",
            "bodyCrc32": "0", "heartbeatTimeoutMillis": "3600000"}, body, opaque=g + 1,
            version=codes.V4_9_8).encode() for g in batch))
        registered += sum(answer.startswith("0 ") for answer in answers(brokers, src, len(batch)))
    request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=120) as one:
        one.sendall(request.replace(b"HTTP/1.1", b"HTTP/1.0"))
        size = len(b"".join(iter(lambda: one.recv(1 << 20), b"")))
    started = server.rss_mb()
    sockets = []
    for _ in range(peers):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.metrics_port))
        sock.sendall(request)
        sockets.append(sock)
    highest = started
    for _ in range(10 + peers // 4):  # every request rendered (about 0.3 s each for 17 MB), within the idle timeout
        time.sleep(1)
        highest = max(highest, server.rss_mb())
    for sock in sockets:
        sock.close()
    time.sleep(3)  # the server sees them go (a write fails) before the last scrape, which no one closes then
    with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=120) as one:
        one.sendall(request.replace(b"HTTP/1.1", b"HTTP/1.0"))
        metrics = b"".join(iter(lambda: one.recv(1 << 20), b""))
    refused = [line.split()[-1].decode() for line in metrics.splitlines()
               if line.startswith(b'namesrv_refusals_total{listener="http",reason="memory_budget"}')]
    brokers.close()
    return {"peak_mb": server.peak_mb(), "rss_before_mb": started, "rss_highest_mb": highest, "groups": groups,
            "registered": registered, "answer_mb": round(size / 1e6, 1), "peers": peers,
            "refused_memory_budget": refused[0] if refused else "none"}


def kept(server: Server, groups: int, lookups: int, pad: int, src: Path) -> dict[str, object]:
    """Distinct route lookups, each kept by the server to answer its repeats (a header template,
    an answer frame): what they make it hold."""
    remoting, codes = codec(src)
    body = plain_table_of(["kept", "kept-too"])
    brokers = socket.create_connection(("127.0.0.1", server.port), timeout=120)  # open: its brokers stay
    brokers.sendall(b"".join(register(src, body, f"kept{g:05d}", g + 1, compressed=False) for g in range(groups)))
    registered = sum(answer.startswith("0 ") for answer in answers(brokers, src, groups))
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    started, answered = server.rss_mb(), 0
    for first in range(0, lookups, 50):
        frames = [remoting.RemotingCommand.request(
            remoting.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "kept", "x": f"{n:08d}" + "x" * pad},
            opaque=opaque, version=codes.V4_9_8).encode()
            for n in range(first, min(lookups, first + 50)) for opaque in (1, 2)]
        sock.sendall(b"".join(frames))
        answered += sum(answer.startswith("0 ") for answer in answers(sock, src, len(frames)))
    sock.close()
    brokers.close()
    return {"peak_mb": server.peak_mb(), "rss_before_mb": started, "rss_after_mb": server.rss_mb(),
            "groups": groups, "registered": registered, "lookups": lookups, "answered": answered}


def lists(server: Server, clusters: int, topics: int, name: int, src: Path) -> dict[str, object]:
    """``clusters`` broker groups, each a cluster of its own, all serving the same ``topics``
    topics named in ``name`` characters, then GET_TOPICS_BY_CLUSTER of each cluster, read: what
    the lists the server keeps to answer the next asks make it hold."""
    remoting, codes = codec(src)
    names = [f"{j:07d}".ljust(name, "t") for j in range(topics)]
    table = compressed_table(names)
    brokers = socket.create_connection(("127.0.0.1", server.port), timeout=600)  # open: its brokers stay
    registered = 0
    for first in range(0, clusters, 100):
        frames = []
        for c in range(first, min(clusters, first + 100)):
            ext = {"clusterName": f"list{c:05d}", "brokerAddr": f"127.0.0.1:{20000 + c}",
                   "brokerName": f"list{c:05d}", "brokerId": "0", "compressed": "true", "bodyCrc32": "0",
                   "heartbeatTimeoutMillis": "3600000"}
            frames.append(remoting.RemotingCommand.request(remoting.RequestCode.REGISTER_BROKER, ext, table,
                                                           opaque=c + 1, version=codes.V4_9_8).encode())
        brokers.sendall(b"".join(frames))
        registered += sum(answer.startswith("0 ") for answer in answers(brokers, src, len(frames)))
    time.sleep(1)
    started, asked = server.rss_mb(), 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=600) as sock:
        for c in range(clusters):
            sock.sendall(remoting.RemotingCommand.request(remoting.RequestCode.GET_TOPICS_BY_CLUSTER,
                                                          {"cluster": f"list{c:05d}"}, opaque=c + 1,
                                                          version=codes.V4_9_8).encode())
            asked += sum(answer.startswith("0 ") for answer in answers(sock, src, 1))
    time.sleep(1)
    brokers.close()
    return {"peak_mb": server.peak_mb(), "rss_before_lists_mb": started, "rss_after_mb": server.rss_mb(),
            "clusters": clusters, "registered": registered, "topics": topics, "name": name, "answered": asked}


def routes(server: Server, groups: int, topics: int, src: Path) -> dict[str, object]:
    """``groups`` broker groups all serving the same ``topics`` topics, then one route lookup of
    each topic as a 4.9.8 client asks (standard JSON) and one as a client before 4.9.4 does: what
    the route answers the server keeps to answer the next lookups make it hold."""
    remoting, codes = codec(src)
    table = compressed_table([f"route{j:06d}" for j in range(topics)])
    brokers = socket.create_connection(("127.0.0.1", server.port), timeout=600)  # open: its brokers stay
    registered = 0
    for first in range(0, groups, 100):
        frames = [register(src, table, f"route{g:05d}", g + 1) for g in range(first, min(groups, first + 100))]
        brokers.sendall(b"".join(frames))
        registered += sum(answer.startswith("0 ") for answer in answers(brokers, src, len(frames)))
    time.sleep(1)
    started, got, after_one = server.rss_mb(), [], 0.0
    with socket.create_connection(("127.0.0.1", server.port), timeout=600) as sock:
        for version in (codes.V4_9_8, 317):  # 317: 4.3.0's, answered in fastjson's own JSON
            for first in range(0, topics, 50):
                frames = [remoting.RemotingCommand.request(
                    remoting.RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"route{j:06d}"}, opaque=j + 1,
                    version=version).encode() for j in range(first, min(topics, first + 50))]
                sock.sendall(b"".join(frames))
                got += [answer.split()[0] if answer else "?" for answer in answers(sock, src, len(frames))]
            after_one = after_one or server.rss_mb()
    time.sleep(1)
    brokers.close()
    return {"peak_mb": server.peak_mb(), "rss_before_lookups_mb": started, "rss_after_one_variant_mb": after_one,
            "rss_after_mb": server.rss_mb(), "groups": groups, "registered": registered, "topics": topics,
            "answers": sorted({code: got.count(code) for code in got}.items())}


def clusterinfo(server: Server, groups: int, members: int, name: int, src: Path) -> dict[str, object]:
    """``groups`` broker groups of ``members`` brokers each, every group a cluster of its own and
    every cluster, group name and address ``name`` characters long (the largest table the default
    limits allow: 20,000 groups, 100,000 brokers, 512 characters), then one GET_BROKER_CLUSTER_INFO:
    what the body and the pieces kept to answer the next asks (cluster_info.py) make it hold."""
    remoting, codes = codec(src)
    brokers = socket.create_connection(("127.0.0.1", server.port), timeout=600)  # open: its brokers stay
    registered = 0
    for first in range(0, groups, 20):
        frames = []
        for g in range(first, min(groups, first + 20)):
            table = compressed_table([f"ci{g:05d}a", f"ci{g:05d}b"])  # (a first registration of one topic is refused)
            for b in range(members):
                ext = {"clusterName": f"c{g:05d}-".ljust(name, "c"), "brokerName": f"g{g:05d}-".ljust(name, "g"),
                       "brokerAddr": f"{g}.{b}:".ljust(name, "a"), "brokerId": str(b), "compressed": "true",
                       "bodyCrc32": "0", "heartbeatTimeoutMillis": "3600000"}
                frames.append(remoting.RemotingCommand.request(remoting.RequestCode.REGISTER_BROKER, ext, table,
                                                               opaque=len(frames) + 1, version=codes.V4_9_8).encode())
        brokers.sendall(b"".join(frames))
        registered += sum(answer.startswith("0 ") for answer in answers(brokers, src, len(frames)))
    time.sleep(1)
    started = server.rss_mb()
    with socket.create_connection(("127.0.0.1", server.port), timeout=600) as sock:
        sock.sendall(remoting.RemotingCommand.request(remoting.RequestCode.GET_BROKER_CLUSTER_INFO, opaque=1,
                                                      version=codes.V4_9_8).encode())
        decoder, frames = remoting.FrameDecoder(1 << 31), []  # (past a Java client's 16 MiB at the largest table)
        while not frames:
            data = sock.recv(1 << 20)
            if not data:
                break
            frames += decoder.feed(data)
        answered = f"{remoting.RemotingCommand.decode(frames[0]).code} {len(frames[0])} bytes" if frames else "closed"
    time.sleep(1)
    brokers.close()
    return {"peak_mb": server.peak_mb(), "rss_before_ask_mb": started, "rss_after_mb": server.rss_mb(),
            "groups": groups, "members": members, "name": name, "registered": registered,
            "answered": answered[:40]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attacks", default="stall,bomb",
                        help="comma-separated: stall,bomb,behind,queue,unread,amplify,http,kept,lists,routes,"
                        "clusterinfo")
    parser.add_argument("--budget", type=int, default=0)
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a line of the server's -c file (repeat)")
    parser.add_argument("--peers", type=int, default=40)
    parser.add_argument("--bomb-mib", type=int, default=300)
    parser.add_argument("--behind-topics", type=int, default=1_000_000)
    parser.add_argument("--behind-seconds", type=float, default=8)
    parser.add_argument("--behind-peers", type=int, default=20)
    parser.add_argument("--amplify-brokers", type=int, default=8)
    parser.add_argument("--amplify-topics", type=int, default=200_000)
    parser.add_argument("--unread-groups", type=int, default=2000)
    parser.add_argument("--unread-peers", type=int, default=4)
    parser.add_argument("--unread-lookups", type=int, default=0, help="each peer's (0: 64 KiB of them)")
    parser.add_argument("--http-groups", type=int, default=5000)
    parser.add_argument("--http-name", type=int, default=400, help="characters of each cluster and broker name")
    parser.add_argument("--http-peers", type=int, default=128)
    parser.add_argument("--kept-groups", type=int, default=4)
    parser.add_argument("--kept-lookups", type=int, default=2000)
    parser.add_argument("--kept-pad", type=int, default=0, help="characters of padding in each lookup")
    parser.add_argument("--lists-clusters", type=int, default=200)
    parser.add_argument("--lists-topics", type=int, default=2000)
    parser.add_argument("--lists-name", type=int, default=500, help="characters of each topic's name")
    parser.add_argument("--routes-groups", type=int, default=500)
    parser.add_argument("--routes-topics", type=int, default=2000)
    parser.add_argument("--clusterinfo-groups", type=int, default=20_000)
    parser.add_argument("--clusterinfo-members", type=int, default=5, help="brokers of each group")
    parser.add_argument("--clusterinfo-name", type=int, default=512, help="characters of each name and address")
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    result: dict[str, object] = {"budget": args.budget or "default", "config": args.config,
                                 "load": os.getloadavg()[0]}
    attacks = {
        "stall": lambda s: stall(s, args.peers),
        "bomb": lambda s: bomb(s, args.bomb_mib, args.src),
        "behind": lambda s: behind(s, args.behind_peers, args.behind_topics, args.behind_seconds, args.src),
        "queue": lambda s: queue(s, args.peers, args.behind_topics, args.src),
        "amplify": lambda s: amplify(s, args.amplify_brokers, args.amplify_topics, args.src),
        "unread": lambda s: unread(s, args.unread_groups, args.unread_peers, args.unread_lookups, args.src),
        "http": lambda s: http(s, args.http_groups, args.http_name, args.http_peers, args.src),
        "kept": lambda s: kept(s, args.kept_groups, args.kept_lookups, args.kept_pad, args.src),
        "routes": lambda s: routes(s, args.routes_groups, args.routes_topics, args.src),
        "lists": lambda s: lists(s, args.lists_clusters, args.lists_topics, args.lists_name, args.src),
        "clusterinfo": lambda s: clusterinfo(s, args.clusterinfo_groups, args.clusterinfo_members,
                                             args.clusterinfo_name, args.src),
    }
    for name in args.attacks.split(","):
        attack = attacks[name]
        server = Server(args.src, args.budget, args.config)
        try:
            result[name] = {"start_mb": server.start_mb, **attack(server)}
        finally:
            server.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
