"""Facts from the packets: a tiny pcap reader and frame splitter of its own, independent of the report's
decoder, and the steps file's timestamps."""
from __future__ import annotations

import datetime as dt
import gzip
import json
import lzma
import re
import socket
import struct
from collections import Counter, defaultdict
from pathlib import Path


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()


#: link type -> (header length, where its ethertype is): Ethernet, Linux cooked v1 (SLL) and v2 (SLL2); raw IP
#: (a TUN device's, LINKTYPE_RAW) has no header and no ethertype: its first nibble says IPv4 or IPv6
LINK_HEADERS = {1: (14, 12), 113: (16, 14), 276: (20, 0), 101: (0, None)}
IPV4, IPV6 = b"\x08\x00", b"\x86\xdd"


def _raw(path: Path) -> bytes:
    """A capture file's bytes, inflated if gzip (as tcpdump -z gzip and gzip -9 -n leave them) or xz (the
    largest captures of the corpus are kept so, to keep it small)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        return gzip.decompress(raw)
    return lzma.decompress(raw) if raw[:6] == b"\xfd7zXZ\x00" else raw


PCAPNG = b"\x0a\x0d\x0d\x0a"


def records(path: Path):
    """(t, link type, captured bytes, length on the wire) of each packet of a classic pcap or a pcapng
    (its Enhanced Packet Blocks, each with its own interface's link type and time resolution), gz or not."""
    raw = _raw(path)
    if raw[:4] == PCAPNG:
        yield from _pcapng_records(raw)
        return
    if len(raw) < 24:
        return  # no capture header (a file tcpdump had written nothing to when it was killed): no packet
    magic = raw[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    link = struct.unpack(endian + "I", raw[20:24])[0] & 0xFFFF
    off = 24
    while off + 16 <= len(raw):
        sec, frac, incl, orig = struct.unpack(endian + "IIII", raw[off:off + 16])
        if off + 16 + incl > len(raw):
            return  # a last record cut short (a capture killed while writing it): not a packet, not read
        yield sec + frac / (1e9 if nano else 1e6), link, raw[off + 16:off + 16 + incl], orig
        off += 16 + incl


def _pcapng_blocks(raw: bytes):
    """(block type, body, byte order) of each block of a pcapng (its sections' byte orders)."""
    off, endian = 0, "<"
    while off + 12 <= len(raw):
        if raw[off:off + 4] == PCAPNG:
            endian = "<" if raw[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
        kind, length = struct.unpack(endian + "II", raw[off:off + 8])
        if length < 12 or off + length > len(raw):
            return
        yield kind, raw[off + 8:off + length - 4], endian
        off += length


def _options(body: bytes, endian: str):
    """(code, value) of a block's options."""
    off = 0
    while off + 4 <= len(body):
        code, length = struct.unpack(endian + "HH", body[off:off + 4])
        if code == 0:
            return
        yield code, body[off + 4:off + 4 + length]
        off += 4 + (length + 3) // 4 * 4


def _pcapng_records(raw: bytes):
    interfaces: list[tuple[int, float]] = []  # (link type, seconds per tick) of each interface of the section
    for kind, body, endian in _pcapng_blocks(raw):
        if kind == 0x0A0D0D0A:
            interfaces = []
        elif kind == 1:  # Interface Description Block
            link = struct.unpack(endian + "H", body[:2])[0]
            tick = 1e-6
            for code, value in _options(body[8:], endian):
                if code == 9:  # if_tsresol: a power of 10, or of 2 with the high bit set
                    tick = 2.0 ** -(value[0] & 0x7F) if value[0] & 0x80 else 10.0 ** -value[0]
            interfaces.append((link, tick))
        elif kind == 6:  # Enhanced Packet Block
            interface, high, low, incl, orig = struct.unpack(endian + "IIIII", body[:20])
            link, tick = interfaces[interface]
            yield ((high << 32) | low) * tick, link, body[20:20 + incl], orig


def dropped(path: Path) -> dict | None:
    """What a pcapng's Interface Statistics Blocks say the capture dropped (isb_ifdrop) and received
    (isb_ifrecv), summed over its interfaces' last statistics; None if no block says so (a classic pcap)."""
    raw = _raw(path)
    if raw[:4] != PCAPNG:
        return None
    last: dict[int, dict[str, int]] = {}
    for kind, body, endian in _pcapng_blocks(raw):
        if kind == 5:  # Interface Statistics Block
            interface = struct.unpack(endian + "I", body[:4])[0]
            stats = {{4: "received", 5: "dropped"}[code]: struct.unpack(endian + "Q", value)[0]
                     for code, value in _options(body[12:], endian) if code in (4, 5)}
            last[interface] = stats
    if not any("dropped" in stats for stats in last.values()):
        return None
    return {"file": path.name, "dropped": sum(s.get("dropped", 0) for s in last.values()),
            "received": sum(s.get("received", 0) for s in last.values())}


def bad_input(path: Path) -> dict | None:
    """A capture file that is not whole: of no byte (its tcpdump killed before it wrote its first 4 KiB), or
    whose last record or block runs past its end (killed while writing it), with the bytes of that last
    part; None for a whole file."""
    raw = _raw(path)
    if not raw:
        return {"file": path.name, "problem": "empty", "trailing_bytes": 0}
    if raw[:4] == PCAPNG:
        off = 0
        while off + 12 <= len(raw):
            length = struct.unpack(("<" if raw[8:12] == b"\x4d\x3c\x2b\x1a" else ">") + "I", raw[off + 4:off + 8])[0]
            if length < 12 or off + length > len(raw):
                break
            off += length
    else:
        endian = "<" if raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        off = 24
        while off + 16 <= len(raw) and off + 16 + struct.unpack(endian + "I", raw[off + 8:off + 12])[0] <= len(raw):
            off += 16 + struct.unpack(endian + "I", raw[off + 8:off + 12])[0]
    return {"file": path.name, "problem": "truncated", "trailing_bytes": len(raw) - off} if off < len(raw) else None


def unread_records(path: Path) -> dict | None:
    """The records of a capture file of link types this reader (and the report) does not read, where it
    holds records of others too (a pcapng of an NFLOG interface and an Ethernet one): how many, of which
    link type (the first met); None if there are none, or if no record of the file is read at all."""
    kinds = Counter(link_type for _t, link_type, _pkt, _orig in records(path))
    unread = {link: n for link, n in kinds.items() if link not in LINK_HEADERS}
    if not unread or len(unread) == len(kinds):
        return None
    return {"file": path.name, "link_type": next(iter(unread)), "records": sum(unread.values())}


def files_missing(folder: Path, files: list[str]) -> list[dict]:
    """Files of a rotated set missing between two of ``files``: in time order, a later file holding a
    connection of the one before it whose bytes, one way, start past where that file left them (bytes
    neither holds: a ring, tcpdump -C -W, wrote over the files between). From the earlier file's last
    packet to the later's first."""
    spans = sorted((part[0][0], part[-1][0], f, part) for f in files if (part := read_pcap(folder / f)))
    found = []
    for (_first, last, before, earlier), (first, _last, after, later) in zip(spans, spans[1:], strict=False):
        left: dict[tuple[str, str], int] = {}  # each way's next sequence number after the earlier file
        for _t, src, dst, flags, seq, payload, missing in earlier:
            left[(src, dst)] = (seq + len(payload) + missing + bool(flags & (SYN | FIN))) % 2**32
        starts: dict[tuple[str, str], int] = {}
        for _t, src, dst, _flags, seq, _payload, _missing in later:
            starts.setdefault((src, dst), seq)
        if any(0 < (starts[way] - left[way]) % 2**32 < 2**31 for way in left.keys() & starts.keys()):
            found.append({"before": before, "after": after, "from": iso(last), "until": iso(first),
                          "seconds": round(first - last, 6)})
    return found


def read_pcap(path: Path):
    """(t, src, dst, flags, seq, payload, missing) of every TCP segment over IPv4 or IPv6 (no extension
    header) of a capture file (Ethernet, SLL, SLL2, raw IP), gz or not; an IPv6 endpoint written "[addr]:port";
    ``missing``: the payload bytes a snap length cut off (by the IP header's length)."""
    out = []
    for t, link_type, pkt, _orig in records(path):
        if link_type not in LINK_HEADERS:
            continue  # another interface's records (dumpcap -i nflog -i lo): unread_records counts them
        link, ethertype_at = LINK_HEADERS[link_type]
        if ethertype_at is None:
            if not pkt or pkt[0] >> 4 not in (4, 6):
                continue
            v6 = pkt[0] >> 4 == 6
        elif len(pkt) < link or pkt[ethertype_at:ethertype_at + 2] not in (IPV4, IPV6):
            continue
        else:
            v6 = pkt[ethertype_at:ethertype_at + 2] == IPV6
        ip = pkt[link:]
        if v6:
            if len(ip) < 40 or ip[6] != 6:
                continue
            ihl, total = 40, 40 + struct.unpack(">H", ip[4:6])[0]
            src_ip = f"[{socket.inet_ntop(socket.AF_INET6, ip[8:24])}]"
            dst_ip = f"[{socket.inet_ntop(socket.AF_INET6, ip[24:40])}]"
        else:
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
        payload = tcp[doff:]
        missing = total - ihl - doff - len(payload)
        out.append((t, f"{src_ip}:{sport}", f"{dst_ip}:{dport}", flags, seq, payload, missing))
    return out


def snap_cuts(path: Path) -> dict | None:
    """The records of a capture file (gz or not) captured shorter than they were sent: how many, the
    bytes not kept, and the longest kept (the snap length); None if none was cut."""
    packets, lost, longest = 0, 0, 0
    for _t, _link, pkt, orig in records(path):
        if len(pkt) < orig:
            packets, lost, longest = packets + 1, lost + orig - len(pkt), max(longest, len(pkt))
    return {"file": path.name, "cut_at": longest, "packets": packets, "bytes_not_captured": lost} if packets else None


FIN, SYN, RST, PSH, ACK = 1, 2, 4, 8, 16


class Conn:
    def __init__(self, client: str, server: str):
        self.client, self.server = client, server
        self.syn = self.synack = self.rst = None
        self.isn = {}  # side -> its initial sequence number (from its SYN / SYN-ACK)
        self.rst_by = None
        self.fin = {}  # side -> t
        self.data = {"c": bytearray(), "s": bytearray()}
        self.next_seq = {}
        self.stamps = {"c": [], "s": []}  # (offset, t)
        self.last_payload = {"c": None, "s": None}
        self.cut = {"c": [], "s": []}  # (offset, length) of bytes a snap length cut (zeros in data)
        self.early: dict = {"c": {}, "s": {}}  # seq -> (payload, missing, t) of segments captured before a hole
        #: (offset in data, bytes, since, until) of each hole no segment ever filled: bytes sent that the capture
        #: missed, between the last chunk captured before them and the first after (close_holes)
        self.holes: dict = {"c": [], "s": []}

    def take(self, side: str, t: float, seq: int, payload: bytes, missing: int) -> None:
        """A segment's bytes as the receiver reads them: in sequence order, each byte once (the copy
        delivered first: a retransmission's or a duplicate's bytes already taken are left out), a segment
        captured ahead of a hole kept until the hole is filled, and then readable at the time it was."""
        exp = self.next_seq.get(side)
        if exp is None:
            exp = self.next_seq[side] = seq
        ahead = (seq - exp) % (1 << 32)
        if 0 < ahead < 1 << 31:
            self.early[side].setdefault(seq, (payload, missing, t))
            return
        if not self._take_one(side, t, seq, payload, missing):
            self._fill(side, seq, payload)
            return
        while self.next_seq[side] in self.early[side]:
            self._append(side, t, *self.early[side].pop(self.next_seq[side])[:2])
        # early segments a later, longer one covered in part: their new tail
        for seq2 in sorted(self.early[side], key=lambda s: (s - self.next_seq[side]) % (1 << 32)):
            if seq2 in self.early[side] and (seq2 - self.next_seq[side]) % (1 << 32) >= 1 << 31:
                self.take(side, t, seq2, *self.early[side].pop(seq2))

    def _take_one(self, side: str, t: float, seq: int, payload: bytes, missing: int) -> bool:
        """A segment at or before the next byte expected: its new bytes appended (False: it had none)."""
        skip = (self.next_seq[side] - seq) % (1 << 32)
        skip = 0 if skip >= 1 << 31 else skip
        if skip >= len(payload) + missing:
            return False
        self._append(side, t, payload[skip:], missing - max(0, skip - len(payload)))
        return True

    def _fill(self, side: str, seq: int, payload: bytes) -> None:
        """A copy of bytes already taken (the same packet captured again on another interface, or a
        retransmission) fills what a snap length cut from the copy taken first: the bytes are the same,
        the fuller copy keeps more of them (dumpcap -i any -s 96 -i lo -s 256)."""
        if not payload or not self.cut[side]:
            return
        data = self.data[side]
        start = len(data) - (self.next_seq[side] - seq) % (1 << 32)
        end = start + len(payload)
        kept = []
        for offset, length in self.cut[side]:
            low, high = max(offset, start), min(offset + length, end)
            if low >= high:
                kept.append((offset, length))
                continue
            data[low:high] = payload[low - start:high - start]
            kept += [(o, n) for o, n in ((offset, low - offset), (high, offset + length - high)) if n > 0]
        self.cut[side] = kept

    def close_holes(self) -> None:
        """Once every packet is read: segments still held ahead of a hole are after bytes the capture
        never had (it dropped them). Each hole is noted (``holes``) and the stream goes on past it, each
        segment at its own time; the frames after it are found again where one begins (frames)."""
        for side in ("c", "s"):
            early = self.early[side]
            while early:
                seq = min(early, key=lambda s: (s - self.next_seq[side]) % (1 << 32))
                payload, missing, t = early.pop(seq)
                ahead = (seq - self.next_seq[side]) % (1 << 32)
                if 0 < ahead < 1 << 31:
                    since = self.stamps[side][-1][1] if self.stamps[side] else None
                    self.holes[side].append((len(self.data[side]), ahead, since, t))
                    self.next_seq[side] = seq
                self._take_one(side, t, seq, payload, missing)

    def _append(self, side: str, t: float, payload: bytes, missing: int) -> None:
        self.stamps[side].append((len(self.data[side]), t))
        self.data[side] += payload
        if missing:
            self.cut[side].append((len(self.data[side]), missing))
            self.data[side] += bytes(missing)
        self.next_seq[side] = (self.next_seq[side] + len(payload) + missing) % (1 << 32)

    def frames(self, side: str):
        """(t, header dict) of every frame sent by side ('c' client, 's' server). A frame whose header
        a snap length cut gets ``_cut``, and of its header only what is plainly whole in the captured
        start: code, flag and opaque followed by their delimiter, extFields' string entries closed."""
        buf, stamps, pos, out = bytes(self.data[side]), self.stamps[side], 0, []
        holes = [offset for offset, *_ in self.holes[side]]
        while pos + 8 <= len(buf):
            length, hl = struct.unpack(">II", buf[pos:pos + 8])
            hole = next((o for o in holes if pos < o < pos + 4 + length), None)
            if hole is not None or (pos in holes and not buf[pos + 8:pos + 16] == b'{"code":'):
                # a frame the capture missed part of, or bytes after a hole: the next frame begins where a
                # header does (length, JSON serialization, '{"code":')
                found = buf.find(b'{"code":', max(pos + 1, hole or pos) + 8)
                if found < 0:
                    break
                pos = found - 8
                continue
            if pos + 4 + length > len(buf):
                break
            hlen = hl & 0xFFFFFF
            header = buf[pos + 8:pos + 8 + hlen]
            t = max((ts for o, ts in stamps if o <= pos), default=None)
            cut = min((o for o, n in self.cut[side] if o + n > pos + 8 and o < pos + 8 + hlen), default=None)
            if cut is not None:
                h = _cut_header(buf[pos + 8:cut])
            else:
                try:
                    h = json.loads(header)
                except ValueError:
                    h = {"_binary": True}
            h["_body"] = buf[pos + 8 + hlen:pos + 4 + length]
            out.append((t, h))
            pos += 4 + length
        return out


def _cut_header(start: bytes) -> dict:
    text = start.decode("utf-8", "ignore")
    h: dict = {"_cut": True}
    for key in ("code", "flag", "opaque"):
        m = re.search(rf'"{key}":(-?\d+)[,}}]', text)
        if m:
            h[key] = int(m.group(1))
    m = re.search(r'"extFields":\{(.*)', text)
    if m:
        # a string closed by its quote is whole (JSON escapes every quote inside one), even where the cut
        # fell right after it
        h["extFields"] = dict(re.findall(r'"(\w+)":"([^"\\]*)"(?=[,}]|$)', m.group(1)))
    return h


def connections(pkts, server_ports: set[int]):
    conns: dict[tuple, list[Conn]] = defaultdict(list)
    for t, src, dst, flags, seq, payload, missing in pkts:
        if int(dst.rsplit(":", 1)[1]) in server_ports:
            client, server, side = src, dst, "c"
        elif int(src.rsplit(":", 1)[1]) in server_ports:
            client, server, side = dst, src, "s"
        else:
            continue
        key = (client, server)
        # a SYN opens a connection unless it repeats the open one's (the same packet captured again on
        # another interface of a bridge, or a retransmission): its first capture is the connection's
        if flags & SYN and not flags & ACK and not (conns[key] and conns[key][-1].isn.get("c") == seq):
            conns[key].append(Conn(client, server))
        if not conns[key]:
            conns[key].append(Conn(client, server))
        c = conns[key][-1]
        if flags & SYN and not flags & ACK:
            if c.syn is None:
                c.syn, c.isn["c"], c.next_seq["c"] = t, seq, (seq + 1) % (1 << 32)
        elif flags & SYN and flags & ACK:
            if c.synack is None:
                c.synack, c.isn["s"], c.next_seq["s"] = t, seq, (seq + 1) % (1 << 32)
        if flags & RST and c.rst is None:
            c.rst, c.rst_by = t, side
        if flags & FIN and side not in c.fin:
            c.fin[side] = t
        if payload or missing:
            c.take(side, t, seq, payload, missing)
            c.last_payload[side] = t
    found = [c for cs in conns.values() for c in cs]
    for c in found:
        c.close_holes()
    return found


#: how far apart the SYNs of one connection's two captures under two address pairs may be (the same
#: packet before and after a NAT rule rewrote it: microseconds apart on one host)
COPY_WITHIN_S = 1.0


def translated_copies(conns: list[Conn]) -> tuple[list[Conn], list[tuple[Conn, Conn]]]:
    """One connection captured under two address pairs, as ``tcpdump -i any`` on a container host
    sees a published port's connections: outside to the host's address, inside (after DNAT) to the
    container's. A NAT rewrites addresses and ports, never sequence numbers: two connections whose
    SYNs carry the same initial sequence number each way (the client's; the server's SYN-ACK, or
    none on either when refused) within ``COPY_WITHIN_S`` are one. The copy whose SYN was captured
    last is kept (the addresses the server itself saw: a packet is captured on its way in, before
    each hop); the others are returned as (copy, kept) pairs."""
    groups: dict[tuple, list[Conn]] = defaultdict(list)
    for c in conns:
        if c.syn is not None:
            groups[(c.isn["c"], c.isn.get("s"))].append(c)
    dropped: dict[int, Conn] = {}
    pairs = []
    for same in groups.values():
        same.sort(key=lambda c: c.syn)
        while len(same) > 1:
            # the copies of one connection: SYNs within COPY_WITHIN_S of the first, each under another pair
            first = same[0]
            batch = [c for c in same if c.syn - first.syn <= COPY_WITHIN_S]
            same = [c for c in same if c.syn - first.syn > COPY_WITHIN_S]
            kept = batch[-1]
            for c in batch[:-1]:
                if (c.client, c.server) != (kept.client, kept.server):
                    dropped[id(c)] = c
                    pairs.append((c, kept))
    return [c for c in conns if id(c) not in dropped], pairs


def second_point_copies(first: list[Conn], second: list[Conn]) -> tuple[list[Conn], list[tuple[Conn, Conn]]]:
    """The connections of a capture taken at a second point (a broker's host) that the first capture
    (the NameServer's host) holds too, as one connection each: the same 4-tuple with the same initial
    sequence numbers each way (the client's SYN, the server's SYN-ACK, or none on either when refused),
    however far apart the two clocks stamped them. The first capture's copy is kept: the NameServer's
    host saw what the NameServer saw. Returns the first's connections with the second's own (none of
    them copies), and the (copy, kept) pairs. A connection begun before either capture (no SYN) has no
    sequence numbers to match here and stays in both: none in the corpus."""
    index = {(c.client, c.server, c.isn["c"], c.isn.get("s")): c for c in first if c.syn is not None}
    own, pairs = [], []
    for c in second:
        kept = index.get((c.client, c.server, c.isn["c"], c.isn.get("s"))) if c.syn is not None else None
        if kept is None:
            own.append(c)
        else:
            pairs.append((c, kept))
    return first + own, pairs


def syn_ports(pkts) -> set[int]:
    """The ports connections were opened to (a SYN without ACK went there): the servers' ports,
    listening or not. A connection opened before the capture began is not seen here."""
    return {int(dst.rsplit(":", 1)[1]) for _t, _src, dst, flags, *_rest in pkts if flags & SYN and not flags & ACK}


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
