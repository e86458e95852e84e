"""``namesrv-admin`` / ``python -m twisted_namesrv.admin``: the command line.

Exit codes: 0 success; 1 any failure (refused, timeout, a non-SUCCESS answer, whose remark
goes to stderr) - and for ``compare``, NameServers that disagree; 2 usage errors and, for
``compare``, a NameServer that could not be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

from . import commands, compare
from .client import DEFAULT_NAMESRV, DEFAULT_TIMEOUT, AdminError, NamesrvClient, Namesrvs, split_namesrv_list

SUBCOMMANDS = {
    # name: (function, help, [(flags, dest, help, required)])
    "clusterList": (commands.cluster_list, "brokers of every cluster (GET_BROKER_CLUSTER_INFO)", []),
    "topicRoute": (commands.topic_route, "a topic's route as JSON (GET_ROUTEINFO_BY_TOPIC)",
                   [("-t", "topic", "topic name", True)]),
    "topicList": (commands.topic_list, "all topics, or a cluster's (GET_ALL_TOPIC_LIST / GET_TOPICS_BY_CLUSTER)",
                  [("-c", "cluster", "only the topics of this cluster", False)]),
    "getKvConfig": (commands.get_kv_config, "one KV config value",
                    [("-s", "namespace", "namespace", True), ("-k", "key", "key", True)]),
    "getKvList": (commands.get_kv_list, "all KV config of a namespace", [("-s", "namespace", "namespace", True)]),
    "updateKvConfig": (commands.update_kv_config, "create or update a KV config value on every NameServer",
                       [("-s", "namespace", "namespace", True), ("-k", "key", "key", True),
                        ("-v", "value", "value", True)]),
    "deleteKvConfig": (commands.delete_kv_config, "delete a KV config value on every NameServer",
                       [("-s", "namespace", "namespace", True), ("-k", "key", "key", True)]),
    "getNamesrvConfig": (commands.get_namesrv_config, "the configuration of every NameServer", []),
    "updateNamesrvConfig": (commands.update_namesrv_config, "set one configuration key on every NameServer",
                            [("-k", "key", "config key", True), ("-v", "value", "config value", True)]),
    "wipeWritePerm": (commands.wipe_write_perm, "clear a broker's write permission on every NameServer",
                      [("-b", "broker", "broker name", True)]),
    "addWritePerm": (commands.add_write_perm, "restore a broker's write permission on every NameServer",
                     [("-b", "broker", "broker name", True)]),
    "deleteTopic": (commands.delete_topic, "delete a topic's routes on every NameServer (not on the brokers, "
                                           "which register it again unless it is deleted there too)",
                    [("-t", "topic", "topic name", True), ("-c", "cluster", "only this cluster's queues", False)]),
}


def _options(parser: argparse.ArgumentParser, namesrv: bool, suppress: bool) -> None:
    """The shared options, on the main parser (with defaults) and on each subcommand
    (SUPPRESS: given after the subcommand, they override; not given, the main value stays)."""
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    if namesrv:
        parser.add_argument("-n", "--namesrv", default=default(os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV),
                            help="NameServer list host:port[;host:port...] (default: $NAMESRV_ADDR or "
                                 f"{DEFAULT_NAMESRV})")
    parser.add_argument("--json", action="store_true", default=default(False), help="machine-readable JSON output")
    parser.add_argument("--timeout", type=float, default=default(DEFAULT_TIMEOUT),
                        help=f"seconds to wait for each answer (default {DEFAULT_TIMEOUT:g})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="namesrv-admin", description="Administer RocketMQ NameServers "
                                     "(Java or twisted-namesrv) over the remoting protocol.")
    _options(parser, namesrv=True, suppress=False)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, (function, help_text, arguments) in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        _options(sub, namesrv=True, suppress=True)
        for flag, dest, arg_help, required in arguments:
            sub.add_argument(flag, f"--{dest}", dest=dest, required=required, help=arg_help, type=str.strip)
        sub.set_defaults(function=function)
    sub = subparsers.add_parser("compare", help="report every difference between NameServers' routes",
                                description="Exit 0 when all agree, 1 when they differ, 2 when one cannot be read.")
    sub.add_argument("servers", nargs="+", metavar="NAMESRV", help="host:port (at least two)")
    sub.add_argument("--data-versions", action="store_true",
                     help="also compare each broker's data version (QUERY_DATA_VERSION per broker address; "
                          "a 5.x NameServer counts that query as a heartbeat of the broker)")
    _options(sub, namesrv=False, suppress=True)
    return parser


def credentials() -> tuple[str, str] | None:
    """NAMESRV_ACCESS_KEY and NAMESRV_SECRET_KEY (the environment keeps the secret off the command
    line): sign every request for a NameServer with aclEnable."""
    access_key, secret_key = os.environ.get("NAMESRV_ACCESS_KEY"), os.environ.get("NAMESRV_SECRET_KEY")
    return (access_key, secret_key) if access_key and secret_key else None


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0)
        return exc.code if isinstance(exc.code, int) else 2
    if args.timeout <= 0:
        err.write("error: --timeout must be positive\n")
        return 2
    if args.command == "compare":
        return run_compare(args, out, err)
    try:
        with Namesrvs(split_namesrv_list(args.namesrv), args.timeout, credentials()) as namesrvs:
            outcome = args.function(namesrvs, args)
    except AdminError as exc:
        err.write(f"error: {exc}\n")
        return 1
    if args.json:
        out.write(json.dumps(outcome.data, indent=2, ensure_ascii=False) + "\n")
    elif outcome.text:
        out.write(outcome.text + "\n")
    for error in outcome.errors:
        err.write(f"error: {error}\n")
    return 1 if outcome.errors else 0


def run_compare(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        addrs = list(dict.fromkeys(a for text in args.servers for a in split_namesrv_list(text)))
    except AdminError as exc:
        err.write(f"error: {exc}\n")
        return 2
    if len(addrs) < 2:
        err.write("error: compare needs at least two different NameServers\n")
        return 2
    snapshots = {}
    for addr in addrs:
        client = NamesrvClient(addr, args.timeout)
        try:
            snapshots[addr] = compare.snapshot(client, args.data_versions)
        except AdminError as exc:
            err.write(f"error: {exc}\n")
        finally:
            client.close()
    if len(snapshots) < len(addrs):
        return 2
    found = compare.differences(snapshots)
    if args.json:
        counts = {addr: dict(zip(("brokers", "topics"), compare.summary(paths), strict=True))
                  for addr, paths in snapshots.items()}
        report = {"namesrvs": addrs, "equal": not found, "counts": counts,
                  "differences": [{"path": list(d.path), "values": d.values} for d in found]}
        out.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    elif found:
        out.write(f"{len(found)} difference(s) between {', '.join(addrs)}:\n")
        out.writelines(f"  {difference.describe()}\n" for difference in found)
    else:
        brokers, topics = compare.summary(snapshots[addrs[0]])
        out.write(f"{', '.join(addrs)} agree: {brokers} broker(s), {topics} topic(s)\n")
    return 1 if found else 0
