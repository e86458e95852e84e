"""How each TRUTH.json of the corpus was built: the builder's arguments after DIR (build.py), by folder.

    python -m tests.spark.truth_reader.build tests/data/captures/real/NAME ARGS...

Keys a builder does not write (``controller_story`` of v5-failover, read from mqadmin's answers in its
steps file) were added by hand afterwards and are kept."""
from __future__ import annotations

from pathlib import Path

LAUNCH = "the launch script polls the port every 0.1 s until the JVM listens"
RETRY = f"{LAUNCH}; while it is down the brokers retry"
OUR_RETRY = ("our launch script polls the port every 0.1 s until the server listens; while it is down the brokers "
             "retry")
OUR_LOGS = ("namesrv.log",)
CUT_NAMING = ("as the report names it: by the address its own UNREGISTER_BROKER on its connection carries whole "
              "(named_by), else by that connection; its address as logged in broker_addr_logged")
OUR_NOTE = ("The NameServer is ours (twisted-namesrv, python -m twisted_namesrv with --compat set to the brokers' "
            "version, defaults otherwise): namesrv.log is its log (UTC, seconds) and events.json its events file "
            "(the data directory's, kept across the restart; sub-second times); both back every stay's end.")


PAUSE = ("broker-a paused with kill -STOP 14:16:12.644Z, resumed with kill -CONT 14:19:02.670Z (170 s): the "
         "NameServer's idle close ends its stay 120 s after its last byte (the log: IDLE exception, then the "
         "unregister of its destroyed channel, 22:18:07 +08:00), it registers again at 14:19:03 ('new broker "
         "registered'): two stays, the first expired, the second from its return. The five tcpdumps of the steps "
         "ran at once on the same loopback; v5-pause, v5-pause60, v5-pause-s96, v5-pause-s64 and v5-pause-nano "
         "each hold one of them (the -s 64 one cut every packet before its payload)")


OPS = ("RocketMQ 5.3.3, two NameServers (:9876, :9877) and broker-a, broker-a-s, broker-b registered with both; "
       "broker-a-s kill -9; broker-b stops cleanly while a consumer of TopicOnB (on broker-b only) runs: its next "
       "lookups and a producer's first one fail, the producer's send then goes by TBW102 to broker-a, which "
       "creates TopicOnB (autoCreateTopicEnable as shipped) and registers it; deleteTopic TopicDel; the whole "
       "cluster stopped cleanly: broker-a, then :9877, then :9876 (each NameServer's stop closes only its own "
       "scanAvailableNameSrv connection, its client side first: not in the packets). Three captures ran at once "
       "on the namespace's loopback, each folder one of them")


COLD = ("RocketMQ 5.3.3, two NameServers: 127.0.0.1:9876 (the rig's bind) and :9877 listening on all addresses "
        "(bindAddress=0.0.0.0, as Java ships), so reached as 127.0.0.1:9877 by the brokers and the proxy and as "
        "10.38.1.1:9877 by an operator's box on the veth (10.38.1.2) and by its own scanAvailableNameSrv probe: one "
        "server, two endpoints in the packets; broker-a and broker-b registered with both; the 5.3.3 proxy (cluster "
        "mode) in front of both for the Python gRPC client; the whole cluster stopped cleanly (the proxy, broker-a, "
        "broker-b, then :9877, then :9876, SIGTERM: no broker's connection open as each NameServer went) and "
        "started again. dumpcap -i lo -i v0 -b duration:30: a pcapng ring of ten 30 s files, each with two "
        "interfaces, gzipped afterwards. namesrv.log leaves out its scanAvailableNameSrv client's lines about "
        "10.38.1.1:9876 (a refused probe every 3 s: 690 lines)")


ZRING = ("RocketMQ 5.3.3, one NameServer, broker-a and broker-b; producer TopicBusy 15000; the NameServer stopped "
         "(SIGTERM, the brokers' connections open: it closes them) and started again 20 s later; then the cluster "
         "stopped cleanly (broker-a, broker-b, then the NameServer: nothing open as it went) and started again 10 s "
         "later. Three captures ran at once on the namespace (a tcpdump -C 1 -W 3 -z gzip ring, a tcpdump -G 20 "
         "-s 128 set, a dumpcap of two interfaces); v5-zring-nflog holds the dumpcap's, v5-zring-gz another run's ring")


def _ops(capture: str) -> list[str]:
    """v5-ops, v5-opsrot and v5-opsng: one run captured three ways at once (they share steps and logs)."""
    return _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop$", "--stopped", "127.0.0.1:9877=namesrv-9877 stop",
                "--why", f"127.0.0.1:9877={LAUNCH}", "--note", OPS, "--note", capture, ports="9876,9877",
                logs=("namesrv.log", "namesrv-9877.log"))


V4OPS = ("RocketMQ 4.9.8, two NameServers (:9876, :9877): broker-a and its slave broker-a-s registered with both, "
         "broker-b with :9876 only (its namesrvAddr names one NameServer: a misconfiguration); wipe/add of broker-b "
         "at :9876 (the log: 12 topics); deleteTopic TopicDel at both; broker-a (master) stops cleanly and the "
         "operator promotes broker-a-s by updateBrokerConfig (brokerId 0, brokerRole ASYNC_MASTER: its next "
         "registration, on the same connection, is as id 0); broker-b stops cleanly while a consumer of TopicOnB "
         "(on broker-b only) runs, then a producer's lookups of TopicOnB fail and its send by TBW102 makes broker-a "
         "create it. The NameServers and the promoted broker-a run on past the capture's end. Four tcpdumps ran at "
         "once on the namespace (-i any), each folder v4-ops-* one of them")


BROKER_LAUNCH = "the broker's launch script polls its port every 0.1 s until the JVM listens"
S96 = ("RocketMQ 4.9.8: one NameServer, broker-a, broker-b; producer TopicBusy 8000 (the brokers' "
       "ports), producer TopicS96 5 (its first lookup fails: a broker creates the topic), topicRoute "
       "NoSuchTopic (fails), broker-b kill -9; 35 s later both captures killed (SIGKILL) with the "
       "cluster running, as a stuck or OOM-killed tcpdump is: each file ends where tcpdump last wrote "
       "its buffer. The two ran at once, each folder one")

def _v4ops(capture: str, *extra: str) -> list[str]:
    """v4-ops-s64, -s128, -ring and -late: one run captured four ways at once (they share steps and logs)."""
    return _one("4.9.8", "--why", f"127.0.0.1:9877={LAUNCH}", *extra, "--note", V4OPS, "--note", capture,
                ports="9876,9877", logs=("namesrv.log", "namesrv-9877.log"))


V6 = ("RocketMQ 5.3.3, the NameServer listening on every address, IPv6 too (bindAddress=::): broker-a, broker-b, "
      "the producer and mqadmin given NAMESRV_ADDR=[::1]:9876, so every connection that carries requests is over "
      "IPv6 ([::1]:9876; the log names its clients [0:0:0:0:0:0:0:1]:PORT), the brokers' own addresses IPv4 "
      "(brokerIP1=127.0.0.1); the launch script's polls and the NameServer's own scanAvailableNameSrv connection "
      "go to 127.0.0.1:9876 (a port check). broker-b kill -9, broker-a stops cleanly, then the NameServer (its "
      "stop closes only its own connection to 127.0.0.1:9876, its client side first: not in the packets)")


def _one(version: str, *extra: str, logs: tuple[str, ...] = ("namesrv.log",), ports: str = "9876",
         why: str = LAUNCH, endpoint: str = "127.0.0.1:9876") -> list[str]:
    return [version, ports, "--logs", *logs, "--why", f"{endpoint}={why}", *extra]


def argv(folder: Path) -> list[str]:
    """The builder's whole command line for one folder: its capture files in name order (rotated files sort
    by their time), then the arguments below."""
    files = sorted(p.name for p in folder.glob("*.pcap*"))
    return [str(folder), *ARGS[folder.name], "--files", *files]


ARGS: dict[str, list[str]] = {
    "v4-expiry": _one("4.9.8"),
    "v5-expiry": _one("5.3.3"),
    "v4-restart": _one("4.9.8", "--restart", "namesrv stop", "namesrv start", why=RETRY),
    "v5-restart": _one("5.3.3", "--restart", "namesrv stop", "namesrv start", why=RETRY),
    "v5-launch": _one("5.3.3", "--note", "No non-loopback address in the namespace: the 5.3.3 NameServer's "
                      "scanAvailableNameSrv client connects to 127.0.0.1:9876, i.e. to itself (a connection with no "
                      "frames, closed by its client side after 120 s idle)"),
    "v5-selfprobe": _one("5.3.3", "--why", "10.37.1.1:9876=the NameServer's own scanAvailableNameSrv (default on) "
                         "connects to <first non-loopback address>:9876 every 3 s; it listens on 127.0.0.1 only"),
    "v5-failover": _one("5.3.3", "--why", "127.0.0.1:28878=the launch script polls the controller port until it "
                        "listens", "--note", "In the NameServer's route a master is brokerId 0: broker-c1 registers "
                        "as 2 (slave), then as 0 when elected, on the same connection; broker-c0 returns as 1.",
                        ports="28876,28878", endpoint="127.0.0.1:28876",
                        why="the launch script polls the port until the JVM listens"),
    "v4-admin": _one("4.9.8", "--stopped", "127.0.0.1:9876=namesrv stop"),
    "v5-admin": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop"),
    "v5-slave": _one("5.3.3"),
    "v4-slave": _one("4.9.8"),
    "v4-moved": _one("4.9.8"),
    "v5-moved": _one("5.3.3"),
    "v4-stall": _one("4.9.8"),
    "v4-multi": _one("4.9.8", "--restart", "127.0.0.1:9877=namesrv on 9877 stop", "namesrv on 9877 start",
                     "--stopped", "127.0.0.1:9878=namesrv on 9878 stop",
                     "--why", "127.0.0.1:9877=launch polling; while down: the brokers' registrations every 30 s",
                     "--why", "127.0.0.1:9878=launch polling; after its stop: the brokers' registrations every 30 s",
                     ports="9876,9877,9878", logs=("namesrv.log", "namesrv-9877.log", "namesrv-9878.log")),
    "v5-pair": _one("5.3.3", "--why", f"127.0.0.1:9877={LAUNCH}",
                    "--note", "Two capture files as from two hosts: v5-pair-a.pcap.gz holds only port 9876 for the "
                    "whole run, v5-pair-b.pcap.gz only port 9877 and starts later / ends earlier: what is alive at "
                    "9877 is alive at the end of file b",
                    "--note", "127.0.0.1:9877's 'up' is the first connection file b saw: that NameServer started "
                    "before file b began (steps: 05:47:16.934Z start); no restart.",
                    ports="9876,9877", logs=("namesrv.log", "namesrv-9877.log")),
    "v5-cut": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note", "tcpdump -i any -s 200: Linux "
                   "cooked v2, every packet longer than 200 bytes cut there; a broker whose brokerAddr the cut left "
                   f"out is named {CUT_NAMING}"),
    "v5-nskill": _one("5.3.3", "--restart", "kill -9 namesrv", "namesrv start", why=RETRY),
    "v4-delslave": _one("4.9.8"),
    "v5-partition": _one("5.3.3", "--note", "broker-b is cut off by iptables rules on its connection to the "
                         "NameServer (steps): none of its packets after the cut is in the capture, the NameServer's "
                         "to it are (the FIN of its expiry, retransmitted unanswered) until the cut heals"),
    "v5-trio": _one("5.3.3", "--restart", "127.0.0.1:9877=kill -9 namesrv on 9877", "namesrv on 9877 start",
                    "--why", "127.0.0.1:9877=launch polling; while it is down the brokers retry",
                    "--why", "127.0.0.1:9878=launch polling", ports="9876,9877,9878",
                    logs=("namesrv.log", "namesrv-9877.log", "namesrv-9878.log")),
    "v5-split": _one("5.3.3", "--note", "broker-a registers its 1,513 topics in two bodies every 30 s "
                     "(enableSplitRegistration, splitRegistrationSize 800); namesrv.log leaves out its 1,500 lines "
                     "'new topic registered, SplitTopicNNNN'"),
    "v5-longname": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note",
                        "broker-long's brokerName is 'broker-' and 2,993 'L' (3,000 characters; "
                        "steps.txt and namesrv.log write it broker-L{2993}): the Java NameServer takes it (no limit on "
                        "a name's length), answers SUCCESS, logs 'new broker registered' and serves its route"),
    "v5-restart2": _one("5.3.3", "--restart", "namesrv stop$", "namesrv start$", "--restart",
                        r"namesrv stop \(again\)", r"namesrv start \(again\)", "--note",
                        "The second run listened for about a second before its SIGTERM: its log has 'RemotingServer "
                        "started' and the shutdown, no 'boot success'", why=RETRY),
    "v4-cutrot": _one("4.9.8", "--note", "tcpdump -i any -s 200 -G 20: Linux cooked v2, every packet longer than "
                      "200 bytes cut there, six files read together; broker-b (5.3.3) registers with the 4.9.8 "
                      f"NameServer; a broker whose brokerAddr the cut left out is named {CUT_NAMING}"),
    "v4-nofilter": _one("4.9.8", "--note", "tcpdump -i any with no filter: the broker's own port 10911 (the "
                        "producer's and the consumer's traffic) is in the capture besides the NameServer's 9876; "
                        "only 9876 is NameServer traffic",
                        "--why", "127.0.0.1:10911=the broker's launch script polls its port every 0.1 s until the "
                        "JVM listens"),
    "v5-nat": _one("5.3.3", "--stopped", "10.88.0.2:9876=namesrv stop", "--note", "tcpdump -i any on a "
                   "container host (steps): broker-b's connections are captured twice under one address pair (on "
                   "the bridge and on the container's veth), broker-a's and the clients' through the published port "
                   "under two (outside to 192.168.77.1:9876, inside after DNAT to 10.88.0.2:9876, the same sequence "
                   "numbers): each connection is counted once, as the NameServer saw it (translated_copies)",
                   endpoint="10.88.0.2:9876"),
    "v5-twohosts": _one("5.3.3", "--stopped", "10.77.0.1:9876=namesrv stop", "--second-point",
                        "v5-twohosts-brokerhost.pcap.gz", "--clock-ahead", "0.35", "--note", "Two hosts, two "
                        "captures (steps): tcpdump on the NameServer's host (v5-twohosts-nshost) and on the brokers' "
                        "host (v5-twohosts-brokerhost), each on its end of the link between them: every connection "
                        "is in both, the same 4-tuple and sequence numbers; the brokers' file was shifted 0.35 s "
                        "later afterwards (editcap -t 0.35: a host whose clock reads 350 ms ahead). Each connection "
                        "is read once, from the NameServer's host's file (second_point)",
                        endpoint="10.77.0.1:9876"),
    "v5-merged": _one("5.3.3", "--stopped", "10.77.0.1:9876=namesrv stop", "--note", "v5-twohosts' two files "
                      "merged into one (mergecap -F pcap -w v5-merged.pcap v5-twohosts-nshost.pcap.gz "
                      "v5-twohosts-brokerhost.pcap.gz, in time order): every packet of a connection twice, the "
                      "brokers' host's copy stamped by its clock (0.35 s ahead); each connection, frame and "
                      "registration read once, as from the two files given together (no second point to name: "
                      "one file)", endpoint="10.77.0.1:9876"),
    "v5-proxy": _one("5.3.3", "--stopped", "127.0.0.1:38876=namesrv stop", "--note", "The 5.3.3 proxy (cluster "
                     "mode) is the NameServer's client for the gRPC producers and consumers behind it: their topics' "
                     "route lookups are its, on its own connections; a gRPC client's failed send is a TOPIC_NOT_EXIST "
                     "answer to the proxy", ports="38876", endpoint="127.0.0.1:38876"),
    "v5-proxygrpc": _one("5.3.3", "--stopped", "127.0.0.1:38876=namesrv stop", "--why",
                         "127.0.0.1:38081=the proxy's launch script polls its gRPC port every 0.1 s until it listens",
                         "--note", "The 5.3.3 proxy's host captured with its NameServer: tcpdump on the NameServer's "
                         "port and the proxy's gRPC (38081) and remoting (38080, not used: the gRPC client is its only "
                         "client) ports. The proxy's remoting talk to the NameServer is read at 38876; its gRPC "
                         "clients' HTTP/2 at 38081 is not RocketMQ remoting", ports="38876",
                         endpoint="127.0.0.1:38876"),
    "v4-lossy": _one("4.9.8", "--stopped", "10.66.0.1:9876=namesrv stop", "--second-point",
                     "v4-lossy-brokerhost.pcap.gz", "--clock-ahead", "0", "--note", "Two hosts on one clock (two "
                     "network namespaces), a lossy, reordering, duplicating link between them (steps: 3% loss, 10% "
                     "reordered, 1% duplicated, 5 ms delay, each way), tcpdump on each end of it (raw IP): every "
                     "connection is in both, with retransmissions, duplicates and segments out of order; each is "
                     "read once, from the NameServer's host's file (second_point), whose clock is the same",
                     endpoint="10.66.0.1:9876"),
    "v5-lossy": _one("5.3.3", "--stopped", "10.66.0.1:9876=namesrv stop", "--second-point",
                     "v5-lossy-brokerhost.pcap.xz", "--clock-ahead", "0", "--note", "v4-lossy with 5.3.3: two hosts "
                     "on one clock (two network namespaces), the link between them impaired by v4-lossy's "
                     "lossylink.py (3% lost, 10% reordered, 1% duplicated, 5 ms delay, each way), tcpdump on each end "
                     "(raw IP); broker-a's store holds 3,000 topics of its own (BigTopic0000..2999, from an earlier "
                     "scenario): its registrations are about 500 kB, many segments each, lost and reordered on the way",
                     endpoint="10.66.0.1:9876"),
    "v4-ring": _one("4.9.8", "--restart", "namesrv stop", "namesrv start", "--why", "127.0.0.1:10911=the broker's "
                    "launch script polls its port every 0.1 s until the JVM listens", "--why", "127.0.0.1:10931=the "
                    "broker's launch script polls its port every 0.1 s until the JVM listens", "--note", "tcpdump -i "
                    "any -s 96 -C 1 -W 5 -z gzip with no filter, started after the brokers registered: Linux cooked "
                    "v2, every packet longer than 96 bytes cut there (no broker's name, id or address survives), "
                    "five files; the brokers stop cleanly, then the NameServer, and all start again (steps). A "
                    f"broker whose brokerAddr the cut left out is named {CUT_NAMING}", ports="9886",
                    endpoint="127.0.0.1:9886", why=RETRY),
    "v5-midsplit": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--stopped",
                        "127.0.0.1:9877=namesrv on 9877 stop", "--note", "tcpdump -i any -s 128 -G 10 started after "
                        "both NameServers ran and both brokers had registered with both: Linux cooked v2, every packet "
                        "longer than 128 bytes cut there (a header's brokerId survives, its brokerName and brokerAddr "
                        "do not), eleven files; broker-a registers its 2,513 topics in four bodies every 30 s "
                        "(enableSplitRegistration, splitRegistrationSize 800); the logs leave out its 2,500 lines "
                        "'new topic registered, MidTopicNNNN'. The brokers stop cleanly, then both NameServers, "
                        f"with no connection of a broker open. A broker whose brokerAddr the cut left out is named "
                        f"{CUT_NAMING}", ports="9876,9877", logs=("namesrv.log", "namesrv-9877.log")),
    "v5-bothcut": _one("5.3.3", "--stopped", "10.79.0.1:9876=namesrv stop", "--second-point",
                       "v5-bothcut-nshost.pcap.gz", "--clock-ahead", "0", "--note", "Each connection between the "
                       "hosts is read once, from the brokers' host's file, which kept more of each packet (128 bytes "
                       "against 96: the brokers' ids survive) (second_point)", "--note", "v5-twohosts with "
                       "tcpdump -i any on each host, each with its own snap length: -s 96 on the NameServer's "
                       "(10.79.0.1; loopback too: the launch script's polls and the NameServer's own probe of "
                       "10.79.0.1:9876), -s 128 on the brokers' (10.79.0.2); Linux cooked v2, one clock. The "
                       "NameServer listens on all addresses (bindAddress=0.0.0.0), so its launch script's poll of "
                       f"127.0.0.1:9876 reaches it. A broker whose brokerAddr the cut left out is named {CUT_NAMING}",
                       endpoint="127.0.0.1:9876"),
    "v5-twosnap": _one("5.3.3", "--stopped", "10.81.0.1:9876=namesrv stop", "--second-point",
                       "v5-twosnap-brokerhost.pcap.gz", "--clock-ahead", "0", "--note", "v5-twohosts with "
                       "tcpdump -i any on each host: -s 200 on the brokers' (10.81.0.2, started first), full length "
                       "on the NameServer's (10.81.0.1; loopback too: the launch script's polls); Linux cooked v2, "
                       "one clock. Each connection between the hosts is read once, from the NameServer's host's "
                       "file, which kept every byte (second_point); the brokers' host's cut is told as information. "
                       "The brokers stop cleanly, then the NameServer, with no connection of a broker open",
                       endpoint="127.0.0.1:9876"),
    "v5-lonestop": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note", "tcpdump -i lo -G 10 "
                        "-Z root: a new file on the first packet 10 s or more after the last file began (three "
                        "files: the launch script's first refused polls; its last ones, its accepted poll and the "
                        "NameServer's own connection opening; the stop's closing packets). No broker or client "
                        "ever connects: the NameServer is asked nothing, so nothing in the packets says it is one; "
                        "its launch script's accepted poll and its own scanAvailableNameSrv connection to "
                        "127.0.0.1:9876 carry no byte (port_checks)"),
    "v4-wrap": _one("4.9.8", "--other-ports", "10911", "10931", "--note",
                    "tcpdump -i any -s 96 -C 1 -W 2 with no filter: a ring of two 1 MB files that wrapped twice (four "
                    "files written, the first two overwritten): v4-wrap.pcap0 holds the third, v4-wrap.pcap1 the "
                    "fourth; the set begins mid-stream, long after the brokers registered. Linux cooked v2, every "
                    f"packet longer than 96 bytes cut there; a broker whose brokerAddr the cut left out is named "
                    f"{CUT_NAMING}"),
    "v4-ring3": _one("4.9.8", "--other-ports", "10911", "10931", "--ring", "v4-ring3.pcap2.xz", "2", "--note",
                     "tcpdump -i any -C 1 -W 3 with no filter and whole packets: a ring of three 1 MB files that "
                     "wrapped (five files written, the first two overwritten: tcpdump's listing in the steps): "
                     "v4-ring3.pcap2 holds the third, v4-ring3.pcap0 the fourth, v4-ring3.pcap1 the fifth; the set "
                     "begins 14:16:25.742Z, 66 s after the capture did, with the brokers registered long before; "
                     "broker-b's kill -9 closes a connection none of whose requests was kept (no stay)"),
    "v5-pause": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note", PAUSE),
    "v5-pause60": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note", PAUSE, "--note",
                       "tcpdump -G 60 -Z root -w 'v5-pause60-%H%M%S.pcap': six files, a new one on the first packet "
                       "60 s or more after the last began, read as one capture"),
    "v5-pause-s96": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note", PAUSE, "--note",
                         "tcpdump -i lo -s 96: every packet longer than 96 bytes cut there (Ethernet, a 32-byte TCP "
                         "header: 30 bytes of payload kept, the frame's length, code and opaque, no broker's name or "
                         f"address); a broker whose brokerAddr the cut left out is named {CUT_NAMING}"),
    "v5-pause-s64": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note", PAUSE, "--note",
                         "tcpdump -i lo -s 64: every packet carrying bytes cut before its first byte of payload "
                         "(Ethernet 14, IP 20, TCP 32 with its timestamps: 66 bytes of headers); the connections' "
                         "opens, closes and refused attempts are there, no frame is: no stay, registration or "
                         "lookup can be read, and the NameServer's traffic is told unread (cut_before_payload)"),
    "v5-pause-nano": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note", PAUSE, "--note",
                          "tcpdump --time-stamp-precision=nano: a pcap of nanosecond stamps (magic a1b23c4d)"),
    "v5-pause-stepped": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--clock-step",
                             "v5-pause-stepped.pcap.xz", "2026-11-30T14:17:40Z", "-90", "--note", PAUSE, "--note",
                             "v5-pause.pcap with its clock stepped back afterwards (steps: editcap -t -90 on its "
                             "packets from 14:17:40, mergecap -a), as NTP's first sync or a VM restored from a "
                             "snapshot would: the truth is built on the true times (the log's), then told as the "
                             "file stamps them; broker-a's idle close (true 14:18:07.7) is stamped 31 s after its "
                             "last heartbeat, inside the times stamped twice: across_clock_step, no silence known"),
    "v5-drops": _one("5.3.3", "--note", "dumpcap -i lo -B 1 (a 1 MiB buffer), paused with kill -STOP from "
                     "08:41:38.928Z to 08:42:26.662Z while 3,000 UDP datagrams to port 9999 filled its buffer: the "
                     "NameServer's packets in the pause were dropped (its pcapng's statistics: 631 received, 5,442 "
                     "dropped); broker-a's connection jumps 7,300 bytes there, its registrations among them "
                     "(silences: missed), the NameServer's log has them all and no expiry"),
    "v5-gaps": _one("5.3.3", "--note", "dumpcap -i lo -B 1 (a 1 MiB buffer), paused with kill -STOP 40 s at a "
                    "time, five times, let run 1.5 s between (it writes its buffer and a datagram: the file never "
                    "goes a minute without a packet) while bursts of UDP datagrams to port 9999 filled its buffer: "
                    "the brokers' requests in the pauses were dropped, more than 120 s of a connection's bytes "
                    "(silences: missed); the NameServer's log has no expiry"),
    "v5-coldstart": _one("5.3.3", "--restart", "127.0.0.1:9876=namesrv stop$", r"namesrv start \(again\)", "--restart",
                         "127.0.0.1:9877=namesrv-9877 stop$", r"namesrv-9877 start \(again\)", "--restart",
                         "10.38.1.1:9877=namesrv-9877 stop$", r"namesrv-9877 start \(again\)",
                         "--why", f"127.0.0.1:9877={LAUNCH}; while the cluster is down the brokers are down too",
                         "--why", "10.38.1.1:9876=the 9876 NameServer's own scanAvailableNameSrv (default on) "
                         "connects to <first non-loopback address>:9876 every 3 s; it listens on 127.0.0.1 only "
                         "(and the operator's box tried it once)", "--note", COLD, ports="9876,9877",
                         logs=("namesrv.log", "namesrv-9877.log"), why=f"{LAUNCH}; while the cluster is down the "
                         "brokers are down too"),
    "v5-zring-nflog": _one("5.3.3", "--restart", r"namesrv stop \(SIGTERM\)", r"namesrv start \(again\)", "--restart",
                           "namesrv stop$", r"namesrv start \(again\)", "--note", ZRING, "--note", "dumpcap -i "
                           "nflog:5 -i lo -f 'tcp port 9876' (iptables NFLOG group 5 of tcp port 9876 both ways, in "
                           "OUTPUT): a pcapng whose first interface is NFLOG (a link type not read) and whose second "
                           "is the loopback's Ethernet, each packet in both; its first 20 records (the loopback's) "
                           "left out afterwards with editcap so that its first record is an NFLOG one. Its NFLOG "
                           "records are told not read (records_not_read), its Ethernet ones read",
                           why=f"{LAUNCH}; while it is down the brokers retry (the first stop), or are stopped too "
                           "(the second: the cluster stopped cleanly, brokers first)"),
    "v5-zring-gz": _one("5.3.3", "--restart", r"namesrv stop \(SIGTERM\)", r"namesrv start \(again\)", "--restart",
                        "namesrv stop$", r"namesrv start \(again\)", "--files-missing", "--note",
                        ZRING.replace("15000", "40000"), "--note", "tcpdump -i any -s 96 -C 1 -W 3 -z gzip -Z root -w "
                        "ns.pcap (no filter): a ring of three 1 MB files that wrapped three times; gzip refused to "
                        "overwrite the first lap's ns.pcapN.gz ('already exists; not overwritten'), so those stayed "
                        "and the newest files stayed unzipped beside them: the first lap, then 40 s of files written "
                        "over, then the last ones. Each file cut down to its tcp port 9876 packets afterwards "
                        "(tshark -Y), the unzipped ones kept as xz: files missing between ns.pcap2.gz and ns.pcap1 "
                        "(files_missing, read from the broker connections' sequence numbers), nothing told across them",
                        why=f"{LAUNCH}; while it is down the brokers retry (the first stop), or are stopped too "
                        "(the second: the cluster stopped cleanly, brokers first)"),
    "v5-anylo": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--why", "10.38.1.1:9876=the "
                     "NameServer's own scanAvailableNameSrv (default on) connects to <first non-loopback "
                     "address>:9876 every 3 s; it listens on 127.0.0.1 only", "--note", "dumpcap -i any -i lo (two "
                     "interfaces that overlap: every packet on the loopback captured twice, once as Linux cooked v1 "
                     "on any, once as Ethernet on lo, in one pcapng): each connection, registration, lookup and "
                     "refused attempt counted once; namesrv.log leaves out its scanAvailableNameSrv client's lines "
                     "about its refused probe of 10.38.1.1:9876"),
    # no NameServer at all: no server's log, the steps file and the packets are the witnesses
    "http9876": ["none", "9876", "--served-log", "http.log", "--note", "No RocketMQ: python3 -m http.server 9876 "
                 "--bind 127.0.0.1 on the NameServer's port, asked GET / 20 times, one connection each (steps); "
                 "http.log is its access log (20 requests, each answered 200). Nothing on the port speaks "
                 "RocketMQ remoting: no NameServer, its connections unread (HTTP), the port a web server's"],
    "v5-ops": _ops("tcpdump -i any -s 0 -w v5-ops.pcap: Linux cooked v2, whole packets"),
    "v5-opsrot": _ops("tcpdump -i any -s 96 -G 30 -Z root -w 'ns-%H%M%S.pcap': Linux cooked v2, every packet "
                      "longer than 96 bytes cut there (no broker's name, id or address survives: each is named by "
                      "its connection), six files named as operators name them, read as one capture"),
    "v5-opsng": _ops("dumpcap -i any -s 200 -w v5-opsng.pcapng: a pcapng of Linux cooked v1 packets cut at 200 "
                     "bytes, its own statistics saying nothing dropped"),
    "v4-ops-s64": _v4ops("tcpdump -i any -s 64 'tcp portrange 9876-9877': Linux cooked v2 (20 bytes), IPv4 and a "
                         "32-byte TCP header: every packet carrying bytes cut before its first byte of payload"),
    "v4-ops-s128": _v4ops("tcpdump -i any -s 128 'tcp portrange 9876-9877': Linux cooked v2, 56 bytes of payload "
                          f"kept (no broker's name or address survives); a broker is named {CUT_NAMING}"),
    "v4-ops-ring": _v4ops("tcpdump -i any -s 128 -C 1 -W 3 with no filter: a ring of three 1 MB files that wrapped "
                          "(five files written, the first two overwritten: tcpdump's listing in the steps): "
                          "v4-ops-ring.pcap2 holds the third, pcap0 the fourth, pcap1 the fifth; the set begins "
                          "mid-stream, after every broker registered and the consumer started", "--ring",
                          "v4-ops-ring.pcap2.xz", "2", "--other-ports", "10909", "10911", "10921", "10931"),
    "v4-ops-late": _v4ops("tcpdump -i any -s 0 'tcp portrange 9876-9877' started at 23:00:57.304Z, after the "
                          "cluster was up: every broker's connection and first registration older than it"),
    "v5-ipv6": _one("5.3.3", "--stopped", "[::1]:9876=namesrv stop", "--note", V6, "--note",
                    "tcpdump -i any -s 0 -w v5-ipv6.pcap 'tcp port 9876': Linux cooked v2, whole packets"),
    "v5-v6ng": _one("5.3.3", "--stopped", "[::1]:9876=namesrv stop", "--note", V6, "--note",
                    "dumpcap -i lo -s 256 -f 'tcp port 9876' -i any -s 96 -f 'tcp port 9876' -w v5-v6ng.pcapng: two "
                    "interfaces that overlap, of two link types (Ethernet, Linux cooked v1) and two snap lengths: "
                    "every packet twice, the cooked copy cut at 96 bytes (8 bytes of an IPv6 segment's payload) "
                    "and mostly stamped first, the loopback's at 256 (170 bytes: a frame's header); each byte "
                    "read from the copy that kept it"),
    # our own server (twisted-namesrv) serving the Java rig's brokers and clients
    "v5-tls": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note", "The NameServer is ours "
                   "(python -m twisted_namesrv --compat 5.3.3 --tls-mode enforcing), its clients this project's "
                   "namesrv-admin: namesrv.log is its log of this run (UTC, seconds)", "--note",
                   "tls.server.mode enforcing (--tls-mode enforcing): four TLS clients (namesrv-admin --tls), then a "
                   "plain one the server closed without a byte (turned_away); the launch script's poll wrote a "
                   "newline (1 byte, unread, refused as plain by the log)", why=OUR_RETRY.split(";")[0]),
    "v5-javatls": _one("5.3.3", "--stopped", "127.0.0.1:9876=namesrv stop", "--note",
                       "The Java NameServer with -Dtls.server.mode=enforcing (a self-signed certificate: "
                       "tls.test.mode.enable as shipped), broker-a and one mqadmin with -Dtls.enable=true: its own "
                       "scanAvailableNameSrv client, the broker and that mqadmin speak TLS; a plain mqadmin's request "
                       "is refused ('Clients intend to establish an insecure connection while this server is running "
                       "in SSL enforcing mode'), its connection closed without a byte (turned_away)"),
    "v5-ours": _one("5.3.3", "--restart", "namesrv stop", "namesrv start", "--note", OUR_NOTE, why=OUR_RETRY,
                    logs=OUR_LOGS),
    "v5-ours-kill": _one("5.3.3", "--restart", "kill -9 namesrv", "namesrv start", "--note", OUR_NOTE,
                         why=OUR_RETRY, logs=OUR_LOGS),
    "v4-ours": _one("4.9.8", "--restart", "namesrv stop", "namesrv start", "--note", OUR_NOTE, why=OUR_RETRY,
                    logs=OUR_LOGS),
    "v4-s96rot": _one("4.9.8", "--note", S96, "--note",
                      "tcpdump -i any -s 96 -G 20 -Z root -w 'v4-s96rot-%H%M%S.pcap' 'tcp port 9876': "
                      "Linux cooked v2 cut at 96 bytes (every broker named by its connection), six "
                      "files, the last of no byte: tcpdump was killed before it wrote its first 4 KiB "
                      "(the capture's last 35 s are in no file)"),
    "v4-s96size": _one("4.9.8", "--note", S96, "--note",
                       "tcpdump -i any -s 96 -C 1 -Z root -w v4-s96size.pcap with no filter: Linux "
                       "cooked v2 cut at 96 bytes, two files (v4-s96size.pcap, 1 MB, then "
                       "v4-s96size.pcap1, its last 4 KiB block written at 02:00:40, whole records by "
                       "chance: what came after, broker-b's kill among it, is in no file)",
                       "--why", f"127.0.0.1:10911={BROKER_LAUNCH}", "--why", f"127.0.0.1:10931={BROKER_LAUNCH}"),
    "v5-reorder": _one("5.3.3", "--stopped", "10.122.0.1:9876=namesrv stop", "--note",
                       "Two hosts on one clock (network namespaces): the NameServer at 10.122.0.1 (bindAddress=::), "
                       "broker-a, broker-b and the producer at 10.122.0.2 (NAMESRV_ADDR=10.122.0.1:9876), joined by "
                       "two TUN devices and reorderlink.py (in this folder), which holds 15% of the data segments "
                       "4 ms so that later ones pass them: reordering, no loss, no duplicates (4 data segments "
                       "captured out of order); tcpdump on the NameServer's end (raw IP). broker-a and broker-b stop "
                       "cleanly, then the NameServer, no connection open as it went",
                       endpoint="10.122.0.1:9876"),
    "v5-v6restart": _one("5.3.3", "--restart", "namesrv stop", "namesrv start", "--stopped",
                         "[::1]:9876=namesrv stop", "--why", "[::1]:9876=while it is down the brokers retry",
                         "--note", "RocketMQ 5.3.3, the NameServer listening on every address, IPv6 too "
                         "(bindAddress=::): broker-a and broker-b given NAMESRV_ADDR=[::1]:9876 (their own addresses "
                         "IPv4), so every connection that carries requests is over IPv6; the launch script's polls "
                         "and the NameServer's own scanAvailableNameSrv connection go to 127.0.0.1:9876 (a port "
                         "check). Its first start booted after the launch script's 15 s of polls (the log's boot "
                         "success, 10:41:52 +08:00; the steps: 'did not open'); the NameServer stopped (SIGTERM, the "
                         "brokers' connections open: it closes them) and started again 19.5 s later, the brokers "
                         "register again; producer TopicV6R 3 (its first lookup fails: broker-a creates the topic); "
                         "broker-a and broker-b stop cleanly, then the NameServer, no broker's connection open as it "
                         "went. tcpdump -i lo -s 0 'tcp port 9876' (Ethernet, whole packets)"),
}
