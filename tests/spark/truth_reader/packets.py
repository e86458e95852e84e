"""Facts from the packets: a tiny pcap reader and frame splitter of its own, independent of the report's
decoder, and the steps file's timestamps."""
from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import struct
from collections import defaultdict
from pathlib import Path


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()


def read_pcap(path: Path):
    """(t, src, dst, flags, payload) of every TCP/IPv4 segment of a classic pcap (Ethernet), gz or not."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    magic = raw[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    off = 24
    out = []
    while off + 16 <= len(raw):
        sec, frac, incl, _orig = struct.unpack(endian + "IIII", raw[off:off + 16])
        pkt = raw[off + 16:off + 16 + incl]
        off += 16 + incl
        t = sec + frac / (1e9 if nano else 1e6)
        if len(pkt) < 14 or pkt[12:14] != b"\x08\x00":
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 15) * 4
        if ip[9] != 6:
            continue
        total = struct.unpack(">H", ip[2:4])[0]
        src_ip = ".".join(map(str, ip[12:16]))
        dst_ip = ".".join(map(str, ip[16:20]))
        tcp = ip[ihl:total]
        sport, dport, seq, _ack, offflags = struct.unpack(">HHIIH", tcp[:14])
        doff = (offflags >> 12) * 4
        flags = offflags & 0x3F
        out.append((t, f"{src_ip}:{sport}", f"{dst_ip}:{dport}", flags, seq, tcp[doff:]))
    return out


FIN, SYN, RST, PSH, ACK = 1, 2, 4, 8, 16


class Conn:
    def __init__(self, client: str, server: str):
        self.client, self.server = client, server
        self.syn = self.synack = self.rst = None
        self.rst_by = None
        self.fin = {}  # side -> t
        self.data = {"c": bytearray(), "s": bytearray()}
        self.next_seq = {}
        self.stamps = {"c": [], "s": []}  # (offset, t)
        self.last_payload = {"c": None, "s": None}

    def frames(self, side: str):
        """(t, header dict) of every frame sent by side ('c' client, 's' server)."""
        buf, stamps, pos, out = bytes(self.data[side]), self.stamps[side], 0, []
        while pos + 8 <= len(buf):
            length, hl = struct.unpack(">II", buf[pos:pos + 8])
            if pos + 4 + length > len(buf):
                break
            hlen = hl & 0xFFFFFF
            header = buf[pos + 8:pos + 8 + hlen]
            t = max((ts for o, ts in stamps if o <= pos), default=None)
            try:
                h = json.loads(header)
            except ValueError:
                h = {"_binary": True}
            h["_body"] = buf[pos + 8 + hlen:pos + 4 + length]
            out.append((t, h))
            pos += 4 + length
        return out


def connections(pkts, server_ports: set[int]):
    conns: dict[tuple, list[Conn]] = defaultdict(list)
    for t, src, dst, flags, seq, payload in pkts:
        if int(dst.rsplit(":", 1)[1]) in server_ports:
            client, server, side = src, dst, "c"
        elif int(src.rsplit(":", 1)[1]) in server_ports:
            client, server, side = dst, src, "s"
        else:
            continue
        key = (client, server)
        if flags & SYN and not flags & ACK:
            conns[key].append(Conn(client, server))
        if not conns[key]:
            conns[key].append(Conn(client, server))
        c = conns[key][-1]
        if flags & SYN and not flags & ACK:
            c.syn = t
            c.next_seq["c"] = seq + 1
        elif flags & SYN and flags & ACK:
            c.synack = t
            c.next_seq["s"] = seq + 1
        if flags & RST and c.rst is None:
            c.rst, c.rst_by = t, side
        if flags & FIN and side not in c.fin:
            c.fin[side] = t
        if payload:
            exp = c.next_seq.get(side)
            if exp is None or seq == exp:
                c.stamps[side].append((len(c.data[side]), t))
                c.data[side] += payload
                c.next_seq[side] = seq + len(payload)
            c.last_payload[side] = t
    return [c for cs in conns.values() for c in cs]


def load_steps(path: Path):
    out = []
    for line in path.read_text().splitlines():
        m = re.match(r"== (\S+Z) (.*)", line)
        if m:
            out.append((parse_iso(m.group(1)), m.group(2)))
    return out


def step_time(steps, pattern: str, nth: int = 0) -> float:
    hits = [t for t, what in steps if re.search(pattern, what)]
    return hits[nth]
