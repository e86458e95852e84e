"""``namesrv-admin`` / ``python -m twisted_namesrv.admin``: the command line.

Exit codes, for every subcommand: 0 success (for ``compare``: the NameServers agree); 1 any
failure - refused, unreachable, timed out, not a remoting peer, a non-SUCCESS answer (its remark
goes to stderr), a config update that did not take, NameServers that disagree; 2 usage errors
only (bad options, a malformed address).
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from typing import TextIO

from ..remoting.codes import version_name
from . import commands, compare, controller_store, simulate
from .client import (
    DEFAULT_NAMESRV,
    DEFAULT_TIMEOUT,
    AdminError,
    NamesrvClient,
    Namesrvs,
    TlsOptions,
    split_namesrv_list,
)
from .controller import CONTROLLER_SUBCOMMANDS
from .terminal import error_lines, json_text, printable, printable_lines

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
    "retireBrokerGroup": (commands.retire_broker_group, "forget a cluster, broker group or member removed on "
                          "purpose, on every NameServer: it is no longer expected (no longer an outage); only "
                          "what has left the routes",
                          [("-c", "cluster", "cluster name", True),
                           ("-b", "broker", "broker group name (without it: the whole cluster)", False),
                           ("-i", "broker_id", "one member's broker id (with -b)", False)]),
}


def _options(parser: argparse.ArgumentParser, namesrv: bool, suppress: bool) -> None:
    """The shared options, on the main parser (with defaults) and on each subcommand
    (SUPPRESS: given after the subcommand, they override; not given, the main value stays)."""
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    if namesrv:
        parser.add_argument("-n", "--namesrv", default=default(os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV),
                            help="NameServer list host[:port][;host[:port]...], port 9876 if omitted "
                                 f"(default: $NAMESRV_ADDR or {DEFAULT_NAMESRV})")
    parser.add_argument("--json", action="store_true", default=default(False), help="machine-readable JSON output")
    parser.add_argument("--timeout", type=float, default=default(DEFAULT_TIMEOUT),
                        help=f"seconds to wait for each answer (default {DEFAULT_TIMEOUT:g})")
    env = os.environ.get
    parser.add_argument("--tls", action="store_true",
                        default=default(env("NAMESRV_TLS", "").lower() in ("1", "true", "yes")),
                        help="speak TLS, as mqadmin with tls.enable=true (default: $NAMESRV_TLS)")
    parser.add_argument("--tls-ca", metavar="FILE", default=default(env("NAMESRV_TLS_CA")),
                        help="PEM CA certificate(s) to verify the NameServer with (default: $NAMESRV_TLS_CA, else "
                             "the system's trust store); implies --tls")
    parser.add_argument("--tls-cert", metavar="FILE", default=default(env("NAMESRV_TLS_CERT")),
                        help="PEM client certificate, for a NameServer with tls.server.authClient "
                             "(default: $NAMESRV_TLS_CERT); implies --tls")
    parser.add_argument("--tls-key", metavar="FILE", default=default(env("NAMESRV_TLS_KEY")),
                        help="its PEM key (default: $NAMESRV_TLS_KEY, else the --tls-cert file)")
    parser.add_argument("--sign-reads", action="store_true",
                        default=default(env("NAMESRV_SIGN_READS", "").lower() in ("1", "true", "yes")),
                        help="sign reads too, for a NameServer with aclReadRequired (default: $NAMESRV_SIGN_READS; "
                             "otherwise only writes are signed)")


def _positive(text: str) -> int:
    """A whole number above 0 (``compare --max-fields``): argparse says so, exit 2, for anything else."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{number} is not above 0")
    return number


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
    for name, (function, help_text, options) in CONTROLLER_SUBCOMMANDS.items():  # RocketMQ 5.x's controller
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        _options(sub, namesrv=False, suppress=True)
        sub.add_argument("-a", "--controller", dest="controller", required=True,
                         help="controller list host:port[;host:port...]")
        for flag, dest, arg_help, needed in options:
            if needed is None:
                sub.add_argument(flag, f"--{dest}", dest=dest, action="store_true", help=arg_help)
            else:
                sub.add_argument(flag, f"--{dest}", dest=dest, required=needed, help=arg_help, type=str.strip)
        sub.set_defaults(function=function)
    sub = subparsers.add_parser("compare", help="report every difference between NameServers' routes",
                                description="Exit 0 when all agree, 1 when they differ or one cannot be read, "
                                            "2 on usage errors.")
    sub.add_argument("servers", nargs="+", metavar="NAMESRV", help="host[:port] (at least two; port 9876 by default)")
    sub.add_argument("--data-versions", action="store_true",
                     help="also compare each broker's data version (QUERY_DATA_VERSION per broker address; "
                          "a 5.x NameServer counts that query as a heartbeat of the broker)")
    sub.add_argument("--strict", action="store_true",
                     help="also compare fields only RocketMQ 5.x sends (enableActingMaster, zoneName, "
                          "topicQueueMappingByBroker) between a 4.x and a 5.x NameServer")
    sub.add_argument("--max-fields", type=_positive, default=compare.PATHS_MAX, metavar="N",
                     help="stop reading a NameServer whose routes hold more than N fields to compare (about 150 "
                          f"bytes of memory each; default {compare.PATHS_MAX:,}: about 60,000 topics on two "
                          "broker groups), each answer's values counted before it is decoded")
    _options(sub, namesrv=False, suppress=True)
    _options(simulate.add_parser(subparsers), namesrv=True, suppress=True)
    controller_store.add_parsers(subparsers)  # files, not the network: no -n, no TLS
    return parser


def credentials() -> tuple[str, str] | None:
    """NAMESRV_ACCESS_KEY and NAMESRV_SECRET_KEY (the environment keeps the secret off the command
    line): sign writes (and reads with --sign-reads) for a NameServer with aclEnable.  One without the other is an
    AdminError (usage: exit 2): sending unsigned requests while the operator meant to sign them
    would be refused, or worse, accepted from a whitelisted address, without a word."""
    access_key, secret_key = os.environ.get("NAMESRV_ACCESS_KEY"), os.environ.get("NAMESRV_SECRET_KEY")
    if bool(access_key) != bool(secret_key):
        given, missing = (("NAMESRV_ACCESS_KEY", "NAMESRV_SECRET_KEY") if access_key
                          else ("NAMESRV_SECRET_KEY", "NAMESRV_ACCESS_KEY"))
        raise AdminError(f"{given} is set but {missing} is not: set both to sign requests (aclEnable), or "
                         "neither to send them unsigned")
    return (access_key, secret_key) if access_key and secret_key else None


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The client TLS context the options ask for, or None for plain TCP."""
    if not (args.tls or args.tls_ca or args.tls_cert):
        return None
    return TlsOptions(args.tls_ca, args.tls_cert, args.tls_key).context()


def _subcommand_word(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The subcommand as typed: the first word that is neither one of ``parser``'s options nor an
    option's value, read as argparse reads them (``-n=HOST``, ``-nHOST``, ``--namesrv=HOST`` carry
    their value; ``--name HOST`` and ``--time 3`` are unique prefixes of options taking one; a
    word after ``--`` is the subcommand).  None when there is none or an abbreviation is ambiguous
    (argparse then says so)."""
    takes = {option: action.nargs != 0 for action in parser._actions for option in action.option_strings}
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if not word.startswith("-") or word == "-":
            return word
        if "=" in word or not word.startswith("--") and len(word) > 2:
            continue  # a value of its own (or short flags run together)
        named = [word] if word in takes else [option for option in takes if word.startswith("--")
                                              and option.startswith(word)]
        if len(named) != 1:
            return None
        if takes[named[0]]:
            next(words, None)
    return None


def parser_choices(parser: argparse.ArgumentParser) -> set[str]:
    """The subcommands ``parser`` has."""
    return {name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices}


def not_ours(word: str) -> str:
    """What an operator used to mqadmin is told for a command namesrv-admin does not have: most of
    mqadmin's talk to brokers, consumers or messages, not to NameServers."""
    hint = {"updateTopic": "mqadmin updateTopic creates a topic on the brokers, which then register it with "
                           "every NameServer; ",
            "updateOrderConf": "mqadmin updateOrderConf writes the NameServers' KV config: namesrv-admin "
                               "updateKvConfig -s ORDER_TOPIC_CONFIG -k TOPIC -v 'broker-a:4;broker-b:4' does the "
                               "same; "}.get(word, "")
    return (f"namesrv-admin: {printable(word)!s} is not one of its subcommands. {hint}namesrv-admin administers "
            "NameServers only; mqadmin's commands for brokers, topics on brokers, consumers and messages stay "
            "with mqadmin. namesrv-admin --help lists its subcommands.\n")


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    word = _subcommand_word(parser, sys.argv[1:] if argv is None else argv)
    if word is not None and word not in parser_choices(parser):
        err.write(not_ours(word))
        return 2
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0)
        return exc.code if isinstance(exc.code, int) else 2
    if args.command in controller_store.COMMANDS:
        return controller_store.run(args, out, err)
    if args.timeout <= 0:
        err.write("error: --timeout must be positive\n")
        return 2
    if args.tls_key and not args.tls_cert:
        err.write("error: --tls-key needs --tls-cert\n")
        return 2
    try:
        tls = tls_context(args)
        keys = credentials()
    except AdminError as exc:
        err.write(f"error: {exc}\n")
        return 2
    try:
        lists = args.servers if args.command == "compare" else [
            args.controller if args.command in CONTROLLER_SUBCOMMANDS else args.namesrv]
        addrs = list(dict.fromkeys(addr for text in lists for addr in split_namesrv_list(text)))
    except AdminError as exc:
        err.write(f"error: {exc}\n")
        return 2
    if args.command == "compare":
        return run_compare(addrs, args, out, err, tls, keys)
    if args.command == "simulate-broker":
        return simulate.run_simulation(addrs, args, keys, out, err, tls)
    try:
        with Namesrvs(addrs, args.timeout, keys, tls, args.sign_reads) as namesrvs:
            outcome = args.function(namesrvs, args)
    except AdminError as exc:  # its text may quote a NameServer's remark
        err.write(f"error: {error_lines(str(exc))}\n")
        return 1
    if args.json:
        out.write(json_text(outcome.data) + "\n")
    elif outcome.text:
        out.write(printable_lines(outcome.text) + "\n")
    for note in namesrvs.skipped:  # a NameServer of -n that did not answer: said, though another did
        err.write(f"warning: {error_lines(note)}\n")
    for error in outcome.errors:
        err.write(f"error: {error_lines(str(error))}\n")
    return 1 if outcome.errors else 0


def run_compare(addrs: list[str], args: argparse.Namespace, out: TextIO, err: TextIO,
                tls: ssl.SSLContext | None = None, keys: tuple[str, str] | None = None) -> int:
    if len(addrs) < 2:
        err.write("error: compare needs at least two different NameServers\n")
        return 2
    snapshots = {}
    for addr in addrs:
        client = NamesrvClient(addr, args.timeout, keys, tls, args.sign_reads)
        try:
            snapshots[addr] = compare.snapshot(client, args.data_versions, args.max_fields)
        except AdminError as exc:
            err.write(f"error: {printable(exc)}\n")
        finally:
            client.close()
    if len(snapshots) < len(addrs):
        return 1
    report = compare.Report.of(addrs, compare.differences(snapshots), args.strict)
    note = report.ignored_note(snapshots)
    if args.json:
        data = {"namesrvs": addrs, "equal": not report.shown,
                "summary": report.summary() if report.shown else compare.agreement(addrs, snapshots[addrs[0]]),
                "versions": {addr: version_name(s.version) for addr, s in snapshots.items()},
                "counts": {addr: s.counts() for addr, s in snapshots.items()},
                "differences": [{"path": list(d.path), "values": d.values} for d in report.shown],
                "ignoredGenerationOnly": len(report.ignored)}
        out.write(json_text(data) + "\n")
        return 1 if report.shown else 0
    lines = report.lines() if report.shown else [compare.agreement(addrs, snapshots[addrs[0]])]
    out.writelines(f"{printable_lines(line)}\n" for line in [*lines, *([note] if note else [])])
    return 1 if report.shown else 0
