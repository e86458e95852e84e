"""Build TRUTH.json for one scenario folder of the corpus:

    python -m tests.spark.truth_reader.build DIR VERSION PORTS --files F... --logs L... [--restart STOP_RX START_RX]...

Facts from the packets, each broker event cross-checked against the NameServer's own log (Java's or
ours, server_logs.py) and, for ours, its events file (``events.json`` of its data directory, when in
DIR); a missing corroboration is printed as PROBLEM and must be looked at by hand.  The steps file
(steps.txt) says when a server was stopped or started, which packets alone cannot always tell."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from . import server_logs
from .packets import (
    bad_input,
    connections,
    dropped,
    files_missing,
    iso,
    load_steps,
    read_pcap,
    second_point_copies,
    snap_cuts,
    step_time,
    syn_ports,
    translated_copies,
    unread_records,
)

REGISTER, UNREGISTER, WIPE, ADD, DELETE_TOPIC = 103, 104, 205, 327, 216
#: how the report names a broker whose registrations' brokerAddr a snap length cut (decode/rows.py's
#: cut_broker_addr, docs/capture-report.md): the connection it registers over
CUT_ADDR = "? (address not captured; registers from {client})"
#: the broker's address in the NameServer's "new broker registered" line: 5.x names it in its
#: BrokerIdentityInfo, 4.9.8 writes it first ("new broker registered, 127.0.0.1:10911 HAServer: ...")
LOGGED_ADDR = re.compile(r"brokerAddr=([^\],\s]+)|new broker registered, ([^\s,]+) HAServer")
CONTROLLER_CODES = range(1001, 1020)
# what a NameServer takes for a broker's heartbeat: REGISTER_BROKER, QUERY_DATA_VERSION, BROKER_HEARTBEAT
HEARTBEATS = {REGISTER, 322, 904}
# a broker's requests that name it with REGISTER_BROKER's fields: UNREGISTER_BROKER, QUERY_DATA_VERSION,
# BROKER_HEARTBEAT
NAMING = {UNREGISTER, 322, 904}
SILENCE_S = 35.0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tests.spark.truth_reader.build", description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("version")
    ap.add_argument("ports")  # comma-separated server ports (NameServers and controllers)
    ap.add_argument("--files", nargs="+", required=True)
    ap.add_argument("--restart", nargs=2, action="append", default=[], metavar=("STOP_RX", "START_RX"))
    ap.add_argument("--stopped", action="append", default=[], metavar="ENDPOINT=STOP_RX")
    # the NameServers' logs; none: no NameServer ran (a web server on its port), the steps file and the
    # packets are the witnesses, and any NameServer event the packets show is a PROBLEM (nothing backs it)
    ap.add_argument("--logs", nargs="*", default=[])
    # a server of another protocol's own log of the requests it served (an HTTP server's access log):
    # its requests' lines counted against the connections the packets show it was asked over
    ap.add_argument("--served-log", default=None, metavar="FILE")
    ap.add_argument("--why", action="append", default=[], metavar="ENDPOINT=TEXT")
    ap.add_argument("--note", action="append", default=[])
    # ports other servers listened on (a broker's, from the steps) whose connections all began before the
    # capture: no SYN in it says they are servers
    ap.add_argument("--other-ports", nargs="+", default=[], metavar="PORT")
    # files of a second capture point (a broker's host) taken at the same time as the others (the
    # NameServer's host): the connections both hold are read from the others once (second_point)
    ap.add_argument("--second-point", nargs="+", default=[], metavar="FILE")
    # a tcpdump ring (-C M -W N) that wrapped: its oldest file kept and how many files written before it were
    # overwritten, as tcpdump's listing in the steps shows them (the files' times, the count of files written)
    ap.add_argument("--ring", nargs=2, action="append", default=[], metavar=("OLDEST_FILE", "OVERWRITTEN"))
    # files of a rotated set missing between those given (a ring that wrapped while tcpdump -z gzip kept its
    # first lap): read from the packets (files_missing), only where asked
    ap.add_argument("--files-missing", action="store_true")
    ap.add_argument("--clock-ahead", type=float, default=None, metavar="SECONDS",
                    help="how far the second point's clock reads ahead of the first's, as the files were made")
    # a file whose clock was stepped as it was made (editcap -t SECONDS on its packets from AT, UTC, joined
    # after the others with mergecap -a): the truth is built on the true times (those the log has), then
    # told in the times the file stamps (clock_steps; a stay whose end's silence reaches into the times
    # stamped twice is across_clock_step)
    ap.add_argument("--clock-step", nargs=3, default=None, metavar=("FILE", "AT", "SECONDS"))
    return ap


def main(argv: list[str] | None = None) -> None:
    """Write DIR/TRUTH.json; print it and every PROBLEM (a packet fact the log does not back)."""
    a = parser().parse_args(argv)
    truth, problems = build(a)
    (Path(a.dir) / "TRUTH.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(json.dumps(truth, indent=1)[:6000])
    for p in problems:
        print("PROBLEM:", p)


def build(a: argparse.Namespace) -> tuple[dict, list[str]]:
    """The truth of one scenario folder, and the problems found cross-checking it."""
    d = Path(a.dir)
    ports = {int(p) for p in a.ports.split(",")}
    points: dict[bool, list] = {False: [], True: []}  # second capture point or not -> its packets
    pairs_in: dict[str, set[frozenset[str]]] = {}  # file -> the address pairs it holds
    seen_until: dict[bool, dict[str, float]] = {False: {}, True: {}}  # endpoint -> end of its last file
    steps_made: list[dict] = []
    for f in a.files:
        second = f in a.second_point
        part = read_pcap(d / f)
        if a.clock_step and f == a.clock_step[0]:
            part, made = unstepped(part, float(a.clock_step[2]))
            steps_made.append({"file": f, **made})
        points[second] += part
        pairs_in[f] = {frozenset((src, dst)) for _t, src, dst, *_rest in part}
        if part:
            for _t, src, dst, *_rest in part:
                for ep in (src, dst):
                    if int(ep.rsplit(":", 1)[1]) in ports:
                        seen_until[second][ep] = max(seen_until[second].get(ep, 0.0), part[-1][0])
    seen = {**seen_until[True], **seen_until[False]}  # the first point's clock for what it holds
    pkts = sorted(points[False] + points[True], key=lambda p: p[0])
    # the capture's span on the first point's clock (the NameServer's host), when it has packets
    first, last = min(p[0] for p in points[False] or pkts), max(p[0] for p in points[False] or pkts)

    def read(server_ports: set[int]):
        """The connections to server_ports, each once: the second capture point's copies left out."""
        return second_point_copies(*(connections(sorted(points[s], key=lambda p: p[0]), server_ports)
                                     for s in (False, True)))

    # a connection captured at two points (the NameServer's host and a broker's) is one, read from the
    # first; one captured under two address pairs (a published port's DNAT on a container host) is one:
    # the copy nearest the server is kept, the others listed in translated_copies
    conns, twice = read(ports)
    conns, copies = translated_copies(conns)
    # a capture with no port filter holds other servers too (a broker's own port): every port a SYN went
    # to that is no NameServer's or controller's; only its connections and refused attempts are read
    other_conns, other_twice = read((syn_ports(pkts) | {int(p) for p in a.other_ports}) - ports)
    other_conns, other_copies = translated_copies(other_conns)
    steps = load_steps(d / "steps.txt")
    log = server_logs.load([d / lf for lf in a.logs])
    problems = []

    # which server endpoints answer which codes: NameServer vs controller
    kinds: dict[str, set] = defaultdict(set)
    for c in conns:
        for _t, h in c.frames("c"):
            if "code" in h:
                kinds[c.server].add("controller" if h["code"] in CONTROLLER_CODES else h["code"])
    accepted = {c.server for c in conns if c.synack}
    # a 5.x controller answers 100x codes (and BROKER_HEARTBEAT 904 in controller mode), never REGISTER_BROKER
    controllers = sorted(e for e in accepted if "controller" in kinds[e] and REGISTER not in kinds[e])
    namesrvs = sorted(e for e in accepted if e not in controllers)
    # an endpoint whose accepted connections carried nothing either way (a launch script's poll of another
    # address the NameServer listens on) answered no NameServer code: a port check, not a NameServer
    carried = {c.server for c in conns if c.data["c"] or c.data["s"]}
    port_checks = [{"endpoint": e, "accepted": sum(c.server == e and bool(c.synack) for c in conns)}
                   for e in namesrvs if e not in carried]
    namesrvs = [e for e in namesrvs if e in carried]
    # an endpoint asked nothing in RocketMQ remoting though its clients' bytes were captured (a web server
    # on the NameServer's port) speaks another protocol: no NameServer (its connections: unread_connections)
    speaking = {e: protocol for e in namesrvs if not kinds[e] and (protocol := other_protocol(conns, e))}
    namesrvs = [e for e in namesrvs if e not in speaking]

    # runs of each NameServer endpoint
    runs: dict[str, list[dict]] = {}
    for e in namesrvs:
        synacks = sorted(c.synack for c in conns if c.server == e and c.synack)
        bounds = []
        for stop_rx, start_rx in a.restart:
            if "=" in stop_rx:  # ENDPOINT=STOP_RX: a restart of that endpoint only
                ep, stop_rx = stop_rx.split("=", 1)
                if ep != e:
                    continue
            stop_t = step_time(steps, stop_rx)
            how = "killed" if any(t == stop_t and re.search(r"kill -9|SIGKILL", w) for t, w in steps) else "stopped"
            bounds.append((stop_t, min(t for t, what in steps if t > stop_t and re.search(start_rx, what)), how))
        rs = [{"up": synacks[0], "down": None, "down_how": None}]
        for stop_t, start_t, how in bounds:
            fins = server_closes(conns, e, stop_t)
            rs[-1]["down"], rs[-1]["down_how"] = (fins[0] if fins else stop_t), how
            rs[-1]["down_in_packets"] = bool(fins)
            rs.append({"up": min(t for t in synacks if t >= start_t), "down": None, "down_how": None})
        for spec in a.stopped:
            ep, rx = spec.split("=", 1)
            if ep == e:  # the last run's stop: the first such step after it came up (a restart's stop reads alike)
                stop_t = min(t for t, what in steps if t >= rs[-1]["up"] and re.search(rx, what))
                fins = server_closes(conns, e, stop_t)
                rs[-1]["down"], rs[-1]["down_how"] = (fins[0] if fins else stop_t), "stopped"
                rs[-1]["down_in_packets"] = bool(fins)  # False: no connection was open, the steps tell it
        runs[e] = rs

    def run_of(e: str, t: float, slack: float = 0.5) -> int:
        for i, r in enumerate(runs[e]):
            if r["up"] - slack <= t and (r["down"] is None or t <= r["down"] + slack):
                return i
        return -1

    # broker events from the frames
    events = []  # (t, endpoint, kind, conn, ext)
    admin = []
    for c in conns:
        if c.server not in namesrvs:
            continue
        answers = {h.get("opaque"): h for _t, h in c.frames("s") if h.get("flag", 0) & 1}
        for t, h in c.frames("c"):
            code, ext = h.get("code"), h.get("extFields") or {}
            ans = answers.get(h.get("opaque"))
            oneway = bool(h.get("flag", 0) & 2)  # RPC_ONEWAY: no answer comes; the log says if it was applied
            ok = (ans is not None and ans.get("code") == 0) or (oneway and ans is None)
            if h.get("_cut") and "opaque" not in h:  # its answer cannot be told: the log says (below)
                ok, ext = True, {**ext, "_answered": False}
            if code == REGISTER:
                events.append((t, c.server, "register" if ok else "register_refused", c, ext))
            elif code == UNREGISTER:
                events.append((t, c.server, "unregister" if ok else "unregister_failed", c, ext))
            elif code in (WIPE, ADD, DELETE_TOPIC):
                admin.append((t, c.server, code, ext, ok, ans))
    events.sort(key=lambda e: e[0])

    # connection closes, in time order with the frames
    for c in {id(ev[3]): ev[3] for ev in events}.values():
        closes = sorted((t, side) for t, side in [(c.fin.get("c"), "c"), (c.fin.get("s"), "s"), (c.rst, c.rst_by)]
                        if t is not None)
        if closes:
            events.append((closes[0][0], c.server, "close", c, {"side": closes[0][1]}))
    events.sort(key=lambda e: e[0])

    stays = []
    open_stay: dict[tuple, dict] = {}
    for t, e, kind, c, ext in events:
        if kind == "close":
            for key, st in list(open_stay.items()):
                if st["_conn"] is c:
                    _close(st, t, ext["side"], c, runs, log, problems, key)
                    del open_stay[key]
            continue
        addr = ext.get("brokerAddr")
        if addr is None and kind == "register":  # a snap length cut its address: see named_on
            addr = named_on(c, ext) or CUT_ADDR.format(client=c.client)
        elif addr is None or (kind == "unregister" and (e, addr) not in open_stay):
            # the broker whose address was cut when it registered over this connection
            unnamed = [k for k, st_ in open_stay.items() if st_["_conn"] is c and st_.get("_cut")]
            addr = unnamed[0][1] if unnamed and kind == "unregister" else addr
        key = (e, addr)
        st = open_stay.get(key)
        if kind == "register":
            bid = int(ext["brokerId"]) if "brokerId" in ext else None  # None: a snap length cut it
            role = None if bid is None else "MASTER" if bid == 0 else "SLAVE"
            if st is None:
                st = {"namesrv": e, "run": run_of(e, t), "cluster": ext.get("clusterName"),
                      "broker_name": ext.get("brokerName"), "broker_addr": addr,
                      "ids": [{"broker_id": bid, "role": role, "from": t}], "registered": t,
                      "end": "alive", "ended_at": None, "registrations": 1, "_conn": c, "_last": t,
                      "_conns": [c]}
                open_stay[key] = st
                stays.append(st)
                hits = log.find("register", t, addr=ext.get("brokerAddr", ""))
                if not hits and c.syn is None:  # its connection is older than the capture: registered before it
                    hits = [h for h in log.find("register", addr=ext.get("brokerAddr", "")) if h[0] < first]
                    if hits:
                        st["registered_before_capture"] = True
                        hits = hits[-1:]
                if not hits:
                    problems.append(f"no registration log line near {iso(t)} for {key}")
                elif "brokerAddr" not in ext and st.get("registered_before_capture"):
                    # which of the brokers registered before the capture this is, the log says at its unregister
                    st["_cut"], st["broker_addr_logged"] = True, None
                elif "brokerAddr" not in ext:  # the log names the broker whose address the capture cut
                    st["_cut"] = True
                    logged = {m.group(1) or m.group(2) for _t, line in hits
                              if (m := LOGGED_ADDR.search(line))}
                    if len(logged) > 1:  # brokers registering seconds apart: the line of its own second
                        logged = {m.group(1) or m.group(2) for lt, line in hits
                                  if lt == int(t) and (m := LOGGED_ADDR.search(line))} or logged
                    st["broker_addr_logged"] = logged.pop() if len(logged) == 1 else None
                    if st["broker_addr_logged"] is None:
                        problems.append(f"the log names {sorted(logged) or 'no address'} for the registration at "
                                        f"{iso(t)} whose address a snap length cut")
                    elif not addr.startswith("? "):
                        st["named_by"] = "brokerAddr of its own request on the connection it registers over"
                        if addr != st["broker_addr_logged"]:
                            problems.append(f"{key}: named {addr} by its connection's requests, the log says "
                                            f"{st['broker_addr_logged']}")
            else:
                st["registrations"] += 1
                if st["ids"][-1]["broker_id"] != bid:
                    st["ids"].append({"broker_id": bid, "role": role, "from": t})
                st["_conn"], st["_last"] = c, t
                if c not in st["_conns"]:
                    st["_conns"].append(c)
        elif kind == "unregister" and st is not None:
            st["end"], st["ended_at"] = "unregistered", t
            st["how"] = "UNREGISTER_BROKER answered SUCCESS" if ext.get("_answered", True) else (
                "UNREGISTER_BROKER (a snap length cut its opaque: the log tells it was applied)")
            hits = log.find("unregister", t, addr=key[1])
            if not hits:
                problems.append(f"no unregister log line near {iso(t)} for {key}")
            else:
                st["how"] += "; log: " + log.message(hits[0][1])[:180]
                if st.get("_cut") and st.get("broker_addr_logged") is None:
                    logged = re.search(r"OK, (\S+:\d+)$", hits[0][1])
                    st["broker_addr_logged"] = logged.group(1) if logged else None
            del open_stay[key]
    for st in stays:
        if st["end"] == "alive":
            st["how"] = "registered when the capture ended (last registration {})".format(iso(st["_last"]))

    # silences: every gap longer than SILENCE_S between a stay's frames to the NameServer (30 s is the
    # broker's registration interval), up to its end (or the capture's end when alive)
    silences = []
    for st in stays:
        times = sorted(t for c in st["_conns"] for t, _h in c.frames("c") if t is not None and t >= st["registered"])
        end = st["ended_at"] if st["ended_at"] is not None else seen.get(st["namesrv"], last)
        times = [t for t in times if t <= end] + [end]
        for a_, b_ in zip(times, times[1:], strict=False):
            if b_ - a_ > SILENCE_S:
                silences.append({"namesrv": st["namesrv"], "broker_addr": st["broker_addr"], "from": a_, "until": b_,
                                 "seconds": round(b_ - a_, 3),
                                 "ended": "expired" if (b_ == end and st["end"] == "expired") else
                                 ("capture_end" if b_ == end and st["end"] == "alive" else "resumed")})
    # not captured: every stretch over 60 s (half the expiry) between a stay's heartbeats over which its
    # connection's sequence numbers jump past bytes the capture never had (dropped): what they were is unknown
    not_captured = []
    for st in stays:
        holes = sorted((h[2], h[3], h[1]) for c in st["_conns"] for h in c.holes["c"] if h[2] is not None)
        if not holes:
            continue
        beats = sorted(t for c in st["_conns"] for t, h in c.frames("c") if t is not None and t >= st["registered"]
                       and h.get("code") in HEARTBEATS and (st["ended_at"] is None or t <= st["ended_at"]))
        for a_, b_ in zip(beats, beats[1:], strict=False):
            missed = missed_in(holes, a_, b_)
            if b_ - a_ > 60.0 and missed:
                not_captured.append({"namesrv": st["namesrv"], "broker_addr": st["broker_addr"], "from": a_,
                                     "until": b_, "seconds": round(b_ - a_, 3), **missed})

    # failovers, moves, renumbers
    failovers, moves, renumbers = [], [], []
    in_failover = set()
    for st in stays:  # a master lost: killed, stopped cleanly (an operator then promoting a slave) or expired
        if st["end"] not in ("connection_closed", "unregistered", "expired") or st["ids"][-1]["broker_id"] != 0:
            continue
        if st["broker_name"] is None:  # a snap length cut its name: which group it was, the packets cannot tell
            continue
        lost = st["ended_at"]
        for other in stays:
            if other is st or other["namesrv"] != st["namesrv"] or other["broker_name"] != st["broker_name"] \
                    or other["broker_addr"] == st["broker_addr"]:
                continue
            if other["registered"] >= lost:  # a promotion: the new master was there before as a slave
                continue
            promo = [i for i in other["ids"] if i["broker_id"] == 0 and i["from"] >= lost - 0.5]
            if promo and promo[0]["from"] - lost < 60:
                back = [s for s in stays if s["namesrv"] == st["namesrv"] and s["broker_addr"] == st["broker_addr"]
                        and s["registered"] > lost
                        and s["ids"][0]["broker_id"] != 0]
                failovers.append({"namesrv": st["namesrv"], "cluster": st["cluster"], "broker_name": st["broker_name"],
                                  "master_lost": lost,
                                  "old_master": st["broker_addr"], "new_master": other["broker_addr"],
                                  "new_master_at": promo[0]["from"], "no_master_s": round(promo[0]["from"] - lost, 3),
                                  "old_master_back_as_slave_at": back[0]["registered"] if back else None})
                in_failover |= {st["broker_addr"], other["broker_addr"]}
    by_identity = defaultdict(list)
    for st in stays:
        if st["broker_name"] is None:  # a snap length cut its name: which broker it was, the packets cannot tell
            continue
        by_identity[(st["namesrv"], st["cluster"], st["broker_name"], st["ids"][0]["broker_id"])].append(st)
    for (e, cl, name, bid), sts in by_identity.items():
        sts.sort(key=lambda s: s["registered"])
        for prev, nxt in zip(sts, sts[1:], strict=False):
            logged = [st.get("broker_addr_logged", st["broker_addr"]) for st in (prev, nxt)]
            if logged[0] != logged[1] and prev["ended_at"] \
                    and prev["ended_at"] <= nxt["registered"] and prev["broker_addr"] not in in_failover:
                moves.append({"namesrv": e, "cluster": cl, "broker_name": name, "broker_id": bid,
                              "from": prev["broker_addr"], "to": nxt["broker_addr"], "at": nxt["registered"]})
    by_addr = defaultdict(list)
    for st in stays:
        if st["ids"][0]["broker_id"] is not None:  # one a snap length cut tells no id, nor a change of it
            by_addr[(st["namesrv"], st["cluster"], st["broker_name"], st["broker_addr"])].append(st)
    for (e, cl, name, addr), sts in by_addr.items():
        if addr in in_failover:
            continue
        sts.sort(key=lambda s: s["registered"])
        for prev, nxt in zip(sts, sts[1:], strict=False):
            if prev["ids"][-1]["broker_id"] != nxt["ids"][0]["broker_id"]:
                renumbers.append({"namesrv": e, "cluster": cl, "broker_name": name, "broker_addr": addr,
                                  "from_id": prev["ids"][-1]["broker_id"], "to_id": nxt["ids"][0]["broker_id"],
                                  "at": nxt["registered"]})
        for st in sts:
            for p, n in zip(st["ids"], st["ids"][1:], strict=False):
                renumbers.append({"namesrv": e, "cluster": cl, "broker_name": name, "broker_addr": addr,
                                  "from_id": p["broker_id"], "to_id": n["broker_id"], "at": n["from"]})

    deletions, perms, topic_counts = [], [], []
    for t, e, code, ext, ok, ans in sorted(admin, key=lambda x: x[0]):
        if not ok:
            problems.append(f"admin code {code} not answered SUCCESS at {iso(t)}: {ans}")
            continue
        if code == DELETE_TOPIC:
            deletions.append({"namesrv": e, "topic": ext.get("topic"), "at": t})
            if log.knows("delete_topic") and not log.find("delete_topic", t, topic=ext.get("topic", "")):
                problems.append(f"no topic deletion log line near {iso(t)} for {ext.get('topic')}")
        else:
            op = "wipe" if code == WIPE else "add"
            perms.append({"namesrv": e, "op": op, "broker_name": ext.get("brokerName"), "at": t})
            counted = _logged_count(log, op, ext.get("brokerName"), t, problems)
            if counted is not None:
                fields = (ans or {}).get("extFields") or {}
                answered = fields.get("wipeTopicCount" if code == WIPE else "addTopicCount")
                if answered is not None and int(answered) != counted[0]:
                    problems.append(f"{op} write perm of {ext.get('brokerName')} at {iso(t)}: the log says "
                                    f"{counted[0]} topics, the answer {answered}")
                topic_counts.append({"namesrv": e, "broker_name": ext.get("brokerName") or counted[2], "at": t,
                                     "op": op, "topics": counted[0], "log": log.message(counted[1])[:180]})

    # refused connection attempts
    refused = defaultdict(list)
    for c in conns + other_conns:
        if c.syn and not c.synack and c.rst_by == "s":
            refused[c.server].append(c.syn)
    why = dict(w.split("=", 1) for w in a.why)
    refused_out = []
    for e, ts in sorted(refused.items()):
        ts.sort()
        groups = defaultdict(list)
        accepted_at = [c for c in conns + other_conns if c.server == e and c.synack]
        first_up = min((c.synack for c in accepted_at), default=None)
        last_close = max((t for c in accepted_at for t in (*c.fin.values(), c.rst) if t is not None), default=None)
        for t in ts:
            if e not in runs and (first_up is None or t > first_up):
                when = "never_listening" if first_up is None else (
                    "after_stop" if last_close is not None and t > last_close else
                    # another server (a broker's port) refusing between connections it accepted: stopped and
                    # started again, its launch script polling (the steps tell it)
                    "while_down" if any(c.synack > t for c in accepted_at)
                    and not any(c.synack <= t <= max(c.fin.values(), default=c.rst or float("inf"))
                                for c in accepted_at) else "while_up")
            elif e not in runs or t < runs[e][0]["up"]:
                when = "before_start"
            elif runs[e][-1]["down"] is not None and t > runs[e][-1]["down"]:
                when = "after_stop"
            else:
                when = "while_down" if run_of(e, t, 0.0) == -1 else "while_up"
            groups[when].append(t)
        for when, g in groups.items():
            refused_out.append({"endpoint": e, "count": len(g), "first": g[0], "last": g[-1], "when": when,
                                "why": why.get(e, "")})
        if "while_up" in groups:
            problems.append(f"{len(groups['while_up'])} refused attempts on {e} while it was up")

    restarts = []
    for e, rs in runs.items():
        for prev, nxt in zip(rs, rs[1:], strict=False):
            restarts.append({"endpoint": e, "down": prev["down"], "up": nxt["up"],
                             "down_s": round(nxt["up"] - prev["down"], 3)})

    for e, rs in runs.items():  # each run's start is logged after the run before it and by its first connection
        for before, r in zip([None, *rs], rs, strict=False):
            since = before["down"] - 1.0 if before else float("-inf")
            if not [t for t, _line in log.find("start") if since < t <= r["up"] + 1.0]:
                problems.append(f"no start log line before {e} accepted its first connection at {iso(r['up'])}")
            if r["down_how"] == "stopped" and log.knows("stop") and not log.find("stop", r["down"]):
                problems.append(f"no stop log line near {e}'s stop at {iso(r['down'])}")
    if (d / EVENTS_FILE).is_file():
        problems += events_disagree(d / EVENTS_FILE, stays, runs)

    def clean(st):
        return {k: v for k, v in st.items() if not k.startswith("_")}

    truth = {
        "name": d.name, "rocketmq": None if a.version == "none" else a.version, "files": a.files, "tolerance_s": 2.0,
        "capture": {"first": first, "last": last},
        "nameservers": [{"endpoint": e, "runs": runs[e]} for e in namesrvs],
        "controllers": [{"endpoint": e} for e in controllers],
        "restarts": restarts, "stays": [clean(s) for s in stays], "failovers": failovers, "moves": moves,
        "renumbers": renumbers, "silences": silences, "topic_deletions": deletions, "write_perm": perms,
        "topic_counts": topic_counts, "refused": refused_out,
        "notes": a.note,
    }
    if other_conns:
        truth["other_servers"] = other_servers(other_conns, why)
    if port_checks:
        truth["port_checks"] = port_checks
    # another service captured beside the NameServers whose clients all speak one other protocol (a 5.x
    # proxy's gRPC port: HTTP/2): unread, as a web server on the NameServer's port is, its connections too
    beside = {e: protocol for e in sorted({c.server for c in other_conns})
              if (protocol := other_protocol(other_conns, e)) is not None}
    if unread := unread_connections(conns + other_conns, [*namesrvs, *speaking, *beside]):
        truth["unread_connections"] = unread
    cut_out = cut_before_payload(conns, namesrvs) + [
        {"endpoint": e, "accepted": sum(c.server == e and bool(c.synack) for c in conns + other_conns),
         "why": f"speaks {protocol}", "protocol": protocol} for e, protocol in sorted({**speaking, **beside}.items())]
    if cut_out:
        truth["unread_servers"] = cut_out
    if a.served_log:
        problems += served_disagree(d / a.served_log, conns, speaking)
    if not a.logs:
        truth["server_logs"] = []  # no NameServer's log backs this truth: the steps and the packets do
    if turned := turned_away(conns, namesrvs, runs, log, problems):
        truth["turned_away"] = turned
    if copies or other_copies:
        truth["translated_copies"] = translated(copies + other_copies)
    if twice or other_twice:
        truth["second_point"], clock_problems = second_point(twice + other_twice, pairs_in, a)
        problems += clock_problems
    if copies or other_copies or twice or other_twice:
        problems += copies_disagree(conns, log)
    cuts = [cut for f in a.files if (cut := snap_cuts(d / f))]
    if cuts:
        truth["cuts"] = cuts
    if not_captured:
        truth["not_captured"] = not_captured
    # a file whose statistics say it dropped none (dumpcap stopped with its buffer never full) lost nothing
    drops = [drop for f in a.files if (drop := dropped(d / f)) and drop["dropped"]]
    if drops:
        truth["dropped"] = drops  # what the file's own statistics say the capture dropped
    bad = [found for f in a.files if (found := bad_input(d / f))]
    if bad:
        truth["bad_inputs"] = bad  # a file of no byte, or one whose last record is cut short (a capture killed)
    unread = [found for f in a.files if (found := unread_records(d / f))]
    if unread:
        truth["records_not_read"] = unread  # records of an interface of a link type not read, beside others
    if a.files_missing:
        truth["files_missing"] = files_missing(d, a.files)
    if a.ring:
        truth["rings"] = [{"oldest_kept": oldest, "overwritten": int(count)} for oldest, count in a.ring]
    if log.flavor == "ours":
        truth["nameserver_software"] = "twisted-namesrv"
    if a.clock_step:
        truth = as_stamped(truth, stays, steps_made, _utc(a.clock_step[1]), float(a.clock_step[2]))
    return _times(truth), problems


def _utc(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


#: a step back in a file's times (in file order) larger than this is the clock's, not packets reordered
STEP_BACK_S = 5.0


def unstepped(part: list, seconds: float) -> tuple[list, dict]:
    """A file's packets in file order, those from its first step back of its times on given their
    true times back (their stamps less ``seconds``, the step as it was made), and the step as the
    file stamps it: ``at`` the latest stamp before it, ``to`` the first after, ``seconds`` between."""
    latest = float("-inf")
    for i, (t, *_rest) in enumerate(part):
        if t < latest - STEP_BACK_S:
            made = {"at": latest, "to": t, "seconds": round(latest - t, 6), "shift_s": seconds}
            return part[:i] + [(t - seconds, *rest) for t, *rest in part[i:]], made
        latest = max(latest, t)
    raise ValueError("--clock-step: no step back in the file's times")


def as_stamped(truth: dict, stays: list[dict], made: list[dict], at: float, seconds: float) -> dict:
    """The truth (built on true times) in the times the stepped file stamps: every time from ``at`` on
    moved by ``seconds`` (durations stay true); ``clock_steps`` says the step; a stay whose end's silence
    (its last heartbeat to its close, as stamped) reaches into the times stamped twice (from the step's
    ``to`` to its ``at``) is ``across_clock_step``: its silence cannot be known from the stamps."""
    def stamped(t: float) -> float:
        return t + seconds if t >= at else t

    def moved(x):
        if isinstance(x, dict):
            return {k: (stamped(v) if k in TIME_KEYS and isinstance(v, float) else moved(v)) for k, v in x.items()}
        if isinstance(x, list):
            return [moved(v) for v in x]
        return x

    out = moved(truth)
    for step in made:
        for st, told in zip(stays, out["stays"], strict=True):
            if st["end"] not in ("expired", "connection_closed") or st["ended_at"] is None:
                continue
            beats = [t for c in st["_conns"] for t, h in c.frames("c")
                     if t is not None and t <= st["ended_at"] and h.get("code") in HEARTBEATS]
            since, until = stamped(max(beats, default=st["registered"])), stamped(st["ended_at"])
            if since <= step["at"] and until >= step["to"]:
                told["across_clock_step"] = True
    out["clock_steps"] = [{"file": m["file"], "at": m["at"], "to": iso(m["to"]), "seconds": m["seconds"],
                           "made": f"editcap -t {m['shift_s']:g} on its packets from {iso(at)}, mergecap -a"}
                          for m in made]
    return out


def unread_connections(conns, namesrvs: list[str]) -> list[dict]:
    """Connections to a NameServer whose client's bytes are no remoting frame: TLS records (a
    handshake's first byte 0x16, version 3.x: a client with TLS on) or anything else (protocol null)."""
    found = []
    for c in conns:
        data = bytes(c.data["c"])
        if sum(n for _o, n in c.cut["c"]) >= len(data):
            continue  # nothing of it captured (a snap length cut every byte): cut, not another protocol
        if c.server in namesrvs and data and not any("code" in h for _t, h in c.frames("c")):
            found.append({"client": c.client, "server": c.server, "bytes": len(data), "protocol": protocol_of(c)})
    return sorted(found, key=lambda u: u["client"])


#: how an HTTP request starts (RFC 9110's methods, then a space) and how an HTTP answer does
HTTP_REQUEST = re.compile(rb"(GET|HEAD|POST|PUT|DELETE|CONNECT|OPTIONS|TRACE|PATCH) ")
HTTP_ANSWER = b"HTTP/"
#: how an HTTP/2 client's connection begins (RFC 9113's preface: a gRPC client's, as 5.x SDKs are)
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n"


def protocol_of(c) -> str | None:
    """What a connection's bytes that are no remoting frame speak, by its first bytes: a TLS record
    (a handshake's first byte 0x16, version 3.x: a client with TLS on), HTTP/2 (its preface: a gRPC
    client), HTTP (a request's method, or an answer's ``HTTP/``), else None."""
    client, server = bytes(c.data["c"][:16]), bytes(c.data["s"][:16])
    if client[:2] == b"\x16\x03":
        return "TLS"
    if client.startswith(HTTP2_PREFACE):
        return "HTTP/2"
    if HTTP_REQUEST.match(client) or server.startswith(HTTP_ANSWER):
        return "HTTP"
    return None


def other_protocol(conns, e: str) -> str | None:
    """The protocol an endpoint asked nothing in RocketMQ remoting speaks: the one every connection
    whose client's bytes were captured speaks (protocol_of), if they agree on one."""
    spoken = {protocol_of(c) for c in conns if c.server == e and c.data["c"]
              and sum(n for _o, n in c.cut["c"]) < len(c.data["c"])}
    return spoken.pop() if len(spoken) == 1 else None


#: a request line in a web server's access log (the common log format, Python's http.server too)
SERVED_LINE = re.compile(r'"(GET|HEAD|POST|PUT|DELETE|CONNECT|OPTIONS|TRACE|PATCH) \S+ HTTP/')


def served_disagree(path: Path, conns, speaking: dict[str, str]) -> list[str]:
    """Whether the other protocol's server logged one request per HTTP request the packets show its
    clients sent (one per connection, as each of them opened one: the log has no client port)."""
    logged = sum(1 for line in path.read_text(errors="replace").splitlines() if SERVED_LINE.search(line))
    sent = sum(1 for c in conns if speaking.get(c.server) == "HTTP" and HTTP_REQUEST.match(bytes(c.data["c"][:16])))
    return [] if logged == sent else [f"{path.name} logs {logged} requests, the packets show {sent} connections "
                                      "each sending one"]


def cut_before_payload(conns, namesrvs: list[str]) -> list[dict]:
    """NameServer endpoints not one byte of whose connections' payload was captured, though they
    carried some (a snap length shorter than the headers: tcpdump -s 64 on Ethernet): what they
    were asked cannot be read at all; with the connections each accepted."""
    out = []
    for e in namesrvs:
        mine = [c for c in conns if c.server == e]
        if any(c.data[side] and sum(n for _o, n in c.cut[side]) < len(c.data[side]) for c in mine for side in "cs"):
            continue
        out.append({"endpoint": e, "accepted": sum(bool(c.synack) for c in mine), "why": "cut before any payload"})
    return out


def turned_away(conns, namesrvs: list[str], runs: dict[str, list[dict]], log, problems: list[str]) -> list[dict]:
    """Clients a NameServer closed after their bytes without sending one (its FIN or reset before
    theirs): refused, not left unanswered; a close within 1 s of one of its runs' ends is its stop
    (v5-restart2: a lookup sent as its second run was stopped), not a refusal. Our server logs the
    first refusal of each host (a plain peer at a port with tls.server.mode=enforcing) and counts
    the later ones: a refusal must have that line, for its client or earlier for its host."""
    found = []
    ends = defaultdict(list)
    for e, rs in runs.items():
        ends[e] += [r["down"] for r in rs if r["down"] is not None]
    for c in conns:
        closed = min([t for t in (c.fin.get("s"), c.rst if c.rst_by == "s" else None) if t is not None],
                     default=None)
        theirs = min([t for t in (c.fin.get("c"), c.rst if c.rst_by == "c" else None) if t is not None],
                     default=None)
        if (c.server not in namesrvs or not c.data["c"] or c.data["s"] or closed is None
                or (theirs is not None and theirs < closed) or any(abs(closed - t) <= 1.0 for t in ends[c.server])):
            continue
        refusal = {"client": c.client, "server": c.server, "at": closed}
        if log.knows("not_tls"):
            host = c.client.rsplit(":", 1)[0]
            lines = [line for t, line in log.find("not_tls", client=f"{host}:") if t <= closed + 1]
            if not lines:
                problems.append(f"no refusal log line for {host} by {iso(closed)} ({c.client} turned away)")
            refusal["how"] = (f"closed by the server after the client's bytes, none sent; this host's first refusal "
                              f"logged (later ones counted): {log.message(lines[0])}" if lines else "")
        found.append(refusal)
    return sorted(found, key=lambda u: u["at"])


def missed_in(holes: list[tuple[float, float, int]], start: float, end: float) -> dict:
    """``missed``: the bytes of the broker's connection sent within a silence that the capture never had (holes
    in its sequence numbers no segment filled: (last chunk before, first chunk after, bytes), in time order), and
    ``missed_only``: whether they leave no stretch of it over 60 s (half the expiry) outside the times
    they may have been sent in (the silence is then the capture's, not the broker's). Nothing if none."""
    inside = [(since, until, count) for since, until, count in holes if start <= since and until <= end]
    if not inside:
        return {}
    heard, longest = start, 0.0
    for since, until, _count in inside:
        longest, heard = max(longest, since - heard), max(heard, until)
    return {"missed": sum(count for *_, count in inside), "missed_only": max(longest, end - heard) <= 60.0}


def translated(copies) -> list[dict]:
    """Each server endpoint a connection was also captured under (``seen_as``: outside a NAT, e.g.
    the host's published port) and the one it is counted as (``counted_as``: the copy nearest the
    server), the client's host in each (a container's SNAT changes that one), with how many
    connections were seen so."""
    count: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for copy, kept in copies:
        count[(copy.server, kept.server, _host(copy.client), _host(kept.client))] += 1
    return [{"seen_as": seen, "counted_as": counted, "client_seen_as": client_seen, "client_counted_as": client_counted,
             "connections": n} for (seen, counted, client_seen, client_counted), n in sorted(count.items())]


#: how far the clock difference measured over the copies' SYNs may be from the one the files were made with
CLOCK_WITHIN_S = 0.01


def second_point(pairs, pairs_in: dict[str, set[frozenset[str]]],
                 a: argparse.Namespace) -> tuple[list[dict], list[str]]:
    """Per server endpoint, the connections a second capture point's files (``copies_in``: a broker's
    host) hold copies of, read from the first point's (``read_from``: the NameServer's host), how many,
    and how far the second's clock reads ahead (``clock_s``: as the files were made, --clock-ahead;
    ``clock_measured_s``: as NTP reckons it, from the copy whose SYN and SYN-ACK were stamped at both
    points with the shortest round trip between them: half the sum of the SYN's and the SYN-ACK's two
    stamps' differences, their trips between the hosts cancelling out). A measure more than
    CLOCK_WITHIN_S from the made one is a problem."""
    by_server: dict[str, list] = defaultdict(list)
    for copy, kept in pairs:
        by_server[copy.server].append((copy, kept))
    out, problems = [], []
    for server, same in sorted(by_server.items()):
        exchanges = [(abs((copy.synack - kept.synack) - (copy.syn - kept.syn)),
                      ((copy.synack - kept.synack) + (copy.syn - kept.syn)) / 2)
                     for copy, kept in same if copy.synack is not None and kept.synack is not None]
        measured = round(min(exchanges)[1] if exchanges else statistics.median(copy.syn - kept.syn
                                                                               for copy, kept in same), 6)
        clock = a.clock_ahead if a.clock_ahead is not None else round(measured, 3)
        if abs(measured - clock) > CLOCK_WITHIN_S:
            problems.append(f"{server}: the copies' SYNs say the second point's clock reads {measured:+} s ahead, "
                            f"the files were made {clock:+} s apart")
        out.append({"server": server, "copies_in": _holding(a.second_point, [c for c, _k in same], pairs_in),
                    "read_from": _holding([f for f in a.files if f not in a.second_point], [k for _c, k in same],
                                          pairs_in),
                    "connections": len(same), "clock_s": clock, "clock_measured_s": measured,
                    "clock_how": "as made (--clock-ahead: the second point's file shifted so)"
                    if a.clock_ahead is not None else "measured"})
    return out, problems


def _holding(files: list[str], conns, pairs_in: dict[str, set[frozenset[str]]]) -> list[str]:
    """The files holding packets of any of conns."""
    return [f for f in files if any(frozenset((c.client, c.server)) in pairs_in[f] for c in conns)]


def _host(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[0]


def copies_disagree(conns, log) -> list[str]:
    """Whether the NameServer accepted each connection once: its log names every channel it accepted
    by the client's address as it saw it (Java's "channelActive, the channel[ADDR]"), so the
    connections counted after the copies are dropped are exactly the channels it logged from the
    captured clients, each within a second of its SYN-ACK; a copy counted as a connection of its own
    would be one line short."""
    if not log.knows("channel_active"):
        return []
    accepted = [c for c in conns if c.synack is not None]
    clients = {c.client for c in accepted}
    logged = [line for _t, line in log.find("channel_active", client="") if
              any(f"[{client}]" in line for client in clients)]
    problems = [f"{c.client} -> {c.server}: no channelActive line for it near {iso(c.synack)}" for c in accepted
                if not log.find("channel_active", c.synack, within=1.0, client=f"{c.client}]")]
    if len(logged) != len(accepted):
        problems.append(f"{len(accepted)} connections counted, the NameServer logged {len(logged)} channels from "
                        "their clients")
    return problems


def named_on(c, ext: dict) -> str | None:
    """The brokerAddr a broker whose registration's address a snap length cut carries whole in one of
    its own requests on the same connection (UNREGISTER_BROKER, QUERY_DATA_VERSION, BROKER_HEARTBEAT:
    its requests all travel over its one channel), when they name one address for its cluster and
    brokerId as far as captured (as the report names it, decode/rows.py)."""
    told = {h["extFields"]["brokerAddr"] for _t, h in c.frames("c") if h.get("code") in NAMING
            and "brokerAddr" in (h.get("extFields") or {})
            and all(ext.get(k) is None or h["extFields"].get(k) in (None, ext[k]) for k in ("clusterName", "brokerId"))}
    return told.pop() if len(told) == 1 else None


def other_servers(other_conns, why: dict[str, str]) -> list[dict]:
    """Each server endpoint of a capture with no port filter that is no NameServer (a broker's own
    port): the connections it accepted and the requests sent to it over them (frames from the
    client side that are no answer), which no NameServer's log backs or judges."""
    out = []
    for e in sorted({c.server for c in other_conns}):
        accepted = [c for c in other_conns if c.server == e and c.synack]
        requests = sum(1 for c in accepted for _t, h in c.frames("c") if not h.get("flag", 0) & 1)
        out.append({"endpoint": e, "accepted": len(accepted), "requests": requests, "why": why.get(e, "")})
    return out


def _logged_count(log, op: str, broker_name: str | None, t: float, problems: list[str]):
    """(topics, line, broker name) of the NameServer's own line for a write-permission change near ``t``:
    how many topics of the broker's it touched, which are the topics it held for that broker then.
    A name a snap length cut (None) is the one such line's near ``t`` (two would be a PROBLEM)."""
    if broker_name is None:
        hits = [(lt, line) for lt, line in log.lines if re.search(rf"{op} write perm of broker\[[^\]]*\]", line)
                and -3.0 <= lt - t <= 4.0]
        if len(hits) > 1:
            problems.append(f"{len(hits)} '{op} write perm' log lines near {iso(t)}: which broker's, the cut hides")
            return None
    else:
        hits = log.find("write_perm", t, op=op, broker=broker_name)
    if not hits:
        problems.append(f"no '{op} write perm' log line near {iso(t)} for {broker_name}")
        return None
    line = hits[0][1]
    return (int(re.search(r", (\d+)\s*$", line).group(1)), line,
            re.search(r"write perm of broker\[([^\]]*)\]", line).group(1))


def _close(st, t, side, c, runs, log, problems, key):
    r = runs[st["namesrv"]][st["run"]]
    client_port = c.client.rsplit(":", 1)[1]
    if side == "c":
        st["end"], st["ended_at"] = "connection_closed", t
        hits = log.find("closed_by_broker", t, port=client_port, addr=st["broker_addr"])
        st["how"] = "the broker's side closed the connection ({})".format("RST" if c.rst == t else "FIN")
        if hits:
            st["how"] += "; log: " + log.message(hits[0][1])[:180]
        else:
            problems.append(f"no close log line near {iso(t)} for {key}")
    elif r["down"] is not None and abs(t - r["down"]) < 3:
        st["end"], st["ended_at"] = "server_stopped", t
        st["how"] = f"the NameServer run ended ({r['down_how']}, steps): its side closed the connection"
    else:
        # The log says which of the NameServer's two clocks ran out: its idle close counts from the
        # connection's last byte, its expiry scan from the broker's last heartbeat (a broker's route
        # lookups in between are bytes, not heartbeats): silence_s is the one that fired.
        st["end"], st["ended_at"] = "expired", t
        hits = log.find("expired", t, port=client_port, addr=st["broker_addr"])
        by_scan = [h for h in hits if log.knows("expired_by_scan") and
                   log.find("expired_by_scan", h[0], within=0.0, addr=st["broker_addr"])]
        last_byte = c.last_payload["c"]
        if by_scan:
            beat = max(bt for conn in st["_conns"] for bt, h in conn.frames("c")
                       if bt is not None and bt <= t and h.get("code") in HEARTBEATS)
            st["silence_s"] = round(t - beat, 3)
            st["how"] = (f"the NameServer's expiry scan dropped it {st['silence_s']} s after its last heartbeat "
                         f"and closed its connection ({round(t - last_byte, 3)} s after its last frame)")
            told = re.search(r"no heartbeat for ([\d.]+) s", by_scan[0][1])
            if told and abs(float(told.group(1)) - st["silence_s"]) > 1.0:
                problems.append(f"{key}: the log says {told.group(1)} s without a heartbeat, the packets "
                                f"{st['silence_s']} s")
        else:
            st["silence_s"] = round(t - last_byte, 3)
            st["how"] = f"the NameServer closed it after {st['silence_s']} s of silence from the broker"
        if hits:
            st["how"] += "; log: " + " | ".join(log.message(h[1])[:180] for h in hits[:2])
        else:
            problems.append(f"no IDLE/expired log line near {iso(t)} for {key}")


EVENTS_FILE = "events.json"
# a stay's end -> the kinds of our server's events that tell it (its events file: kind, info.addr, ts)
END_EVENTS = {"unregistered": {"unregistered"}, "connection_closed": {"closed"}, "expired": {"expired", "idle"}}


def events_disagree(path: Path, stays: list[dict], runs: dict[str, list[dict]]) -> list[str]:
    """What our server's events file (the status page's recent events, kept across restarts in its data
    directory; repeats folded into one with count and first_ts) says otherwise than the packets: every
    registration and every end of a stay has its event within a second, and every run after the first
    its ``started`` event."""
    events = json.loads(path.read_text())["events"]
    problems = []

    def near(kinds: set[str], t: float, addr: str | None = None) -> bool:
        return any(ev["kind"] in kinds and (addr is None or ev["info"].get("addr") == addr)
                   and ev["first_ts"] - 1.0 <= t <= ev["ts"] + 1.0 for ev in events)

    oldest = min((ev["first_ts"] for ev in events), default=float("inf"))
    for st in stays:
        if st["registered"] >= oldest and not near({"registered"}, st["registered"], st["broker_addr"]):
            problems.append(f"events file: no 'registered' for {st['broker_addr']} at {iso(st['registered'])}")
        kinds = END_EVENTS.get(st["end"])
        if kinds and not near(kinds, st["ended_at"], st["broker_addr"]):
            problems.append(f"events file: no {sorted(kinds)} for {st['broker_addr']} at {iso(st['ended_at'])}")
    for e, rs in runs.items():
        for r in rs[1:]:
            if not any(ev["kind"] == "started" and -5.0 <= r["up"] - ev["ts"] <= 15.0 for ev in events):
                problems.append(f"events file: no 'started' before {e} came back at {iso(r['up'])}")
    return problems


def server_closes(conns, e: str, since: float) -> list[float]:
    """Times the server side closed (FIN first, or reset) an accepted connection at e, from since on."""
    out = []
    for c in conns:
        if c.server != e or not c.synack:
            continue
        fs, fc = c.fin.get("s"), c.fin.get("c")
        if fs is not None and fs >= since and (fc is None or fs <= fc):
            out.append(fs)
        elif c.rst_by == "s" and c.rst >= since and fs is None and fc is None:
            out.append(c.rst)
    return sorted(out)


TIME_KEYS = {"first", "last", "up", "down", "until", "registered", "ended_at", "from", "at", "master_lost",
             "new_master_at", "old_master_back_as_slave_at"}


def _times(x):
    if isinstance(x, dict):
        return {k: (iso(v) if k in TIME_KEYS and isinstance(v, float) else _times(v)) for k, v in x.items()}
    if isinstance(x, list):
        return [_times(v) for v in x]
    return x


if __name__ == "__main__":
    main()
