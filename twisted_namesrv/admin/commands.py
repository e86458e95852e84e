"""The subcommands: one request code each, answered as a table like mqadmin's or as JSON.

Reads (clusterList, topicRoute, topicList, getKvConfig, getKvList) ask the first NameServer
of ``-n`` that answers; the operations mqadmin applies to every NameServer (KV and config
updates, write permissions, deleteTopic, getNamesrvConfig) go to each, one line per server.
Each function returns an ``Outcome``; any error in it makes the exit code 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..remoting import RemotingCommand, RequestCode
from ..state.config import parse_properties
from .client import AdminError, Namesrvs, json_body


@dataclass
class Outcome:
    data: Any  # what --json prints
    text: str  # what a human reads
    errors: list[str] = field(default_factory=list)  # each goes to stderr; any means exit 1


def table(widths: tuple[int, ...], rows: list[tuple[Any, ...]]) -> str:
    """Columns padded like Java's ``%-Ns``, two spaces apart."""
    lines = ["  ".join(f"{str(cell):<{width}}" for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    return "\n".join(lines)


# -- reads: the first NameServer that answers --------------------------------------------------

def cluster_list(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    addr, response = namesrvs.ask_any(RequestCode.GET_BROKER_CLUSTER_INFO)
    info = json_body(addr, response)
    rows: list[tuple[Any, ...]] = [("#Cluster Name", "#Broker Name", "#BID", "#Addr")]
    brokers = info.get("brokerAddrTable") or {}
    clusters = info.get("clusterAddrTable") or {}
    for cluster in sorted(clusters):
        for name in sorted(clusters[cluster] or []):
            addrs = (brokers.get(name) or {}).get("brokerAddrs") or {}
            rows += [(cluster, name, bid, addrs[bid]) for bid in sorted(addrs, key=int)]
    return Outcome(info, table((16, 22, 4, 22), rows))


def topic_route(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    ext = {"topic": args.topic, "acceptStandardJsonOnly": "true"}
    addr, response = namesrvs.ask_any(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext)
    route = json_body(addr, response)
    return Outcome(route, json.dumps(route, indent=4, ensure_ascii=False))


def topic_list(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    if args.cluster is None:
        addr, response = namesrvs.ask_any(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    else:
        addr, response = namesrvs.ask_any(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": args.cluster})
    body = json_body(addr, response)
    topics = sorted(body.get("topicList") or [])
    return Outcome(dict(body, topicList=topics), "\n".join(topics))


def get_kv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    ext = {"namespace": args.namespace, "key": args.key}
    addr, response = namesrvs.ask_any(RequestCode.GET_KV_CONFIG, ext)
    value = response.ext.get("value")
    return Outcome(dict(ext, value=value), str(value))


def get_kv_list(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    addr, response = namesrvs.ask_any(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": args.namespace})
    kv = json_body(addr, response).get("table") or {}
    rows = [("#Key", "#Value"), *sorted(kv.items())]
    return Outcome({"namespace": args.namespace, "table": kv}, table((50, 0), rows))


# -- operations on each NameServer -------------------------------------------------------------

def on_each(namesrvs: Namesrvs, code: int, ext: dict[str, str] | None, body: bytes | None,
            done: Callable[[str, RemotingCommand], tuple[str, dict[str, Any]]]) -> Outcome:
    """Send to every NameServer; ``done(addr, answer)`` gives the success line and the JSON
    fields of one server's result."""
    lines, results, errors = [], [], []
    for addr, answer in namesrvs.ask_each(code, ext, body):
        if isinstance(answer, AdminError):
            errors.append(str(answer))
            results.append({"namesrv": addr, "ok": False, "error": str(answer)})
            continue
        try:
            line, fields = done(addr, answer)
        except AdminError as exc:
            errors.append(str(exc))
            results.append({"namesrv": addr, "ok": False, "error": str(exc)})
            continue
        lines.append(line)
        results.append({"namesrv": addr, "ok": True, **fields})
    return Outcome({"results": results}, "\n".join(lines), errors)


def update_kv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    ext = {"namespace": args.namespace, "key": args.key, "value": args.value}
    return on_each(namesrvs, RequestCode.PUT_KV_CONFIG, ext, None, lambda addr, answer: (
        f"create or update kv config [{args.namespace}] {args.key}={args.value} in name server[{addr}] OK", {}))


def delete_kv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    ext = {"namespace": args.namespace, "key": args.key}
    return on_each(namesrvs, RequestCode.DELETE_KV_CONFIG, ext, None, lambda addr, answer: (
        f"delete kv config [{args.namespace}] {args.key} from name server[{addr}] OK", {}))


def get_namesrv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    def done(addr: str, answer: RemotingCommand) -> tuple[str, dict[str, Any]]:
        try:
            config = parse_properties((answer.body or b"").decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise AdminError(f"{addr}: config body is not properties text: {exc}") from None
        lines = [f"============{addr}============"]
        lines += [f"{key:<50}=  {config[key]}" for key in sorted(config)]
        return "\n".join(lines), {"config": config}

    return on_each(namesrvs, RequestCode.GET_NAMESRV_CONFIG, None, None, done)


_CONTROL_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def properties_line(key: str, value: str) -> str:
    """``key=value`` escaped as Properties.store(OutputStream) does (non-ASCII as ``\\uXXXX``:
    Java loads the body as ISO-8859-1), so Properties.load reads back exactly the same."""
    def escape(text: str, is_key: bool) -> str:
        out = []
        for i, ch in enumerate(text):
            if ch in "\\=:#!" or (ch == " " and (is_key or i == 0)):
                out.append("\\" + ch)
            elif ch in _CONTROL_ESCAPES:
                out.append(_CONTROL_ESCAPES[ch])
            elif not " " <= ch <= "~":
                units = ch.encode("utf-16-be")
                out += [f"\\u{units[j:j + 2].hex().upper()}" for j in range(0, len(units), 2)]
            else:
                out.append(ch)
        return "".join(out)

    return f"{escape(key, True)}={escape(value, False)}\n"


def update_namesrv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    body = properties_line(args.key, args.value).encode("utf-8")
    return on_each(namesrvs, RequestCode.UPDATE_NAMESRV_CONFIG, None, body, lambda addr, answer: (
        f"update name server config in name server[{addr}] OK: {args.key} = {args.value}", {}))


def _count(answer: RemotingCommand, name: str) -> int | None:
    value = answer.ext.get(name)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def wipe_write_perm(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    return on_each(namesrvs, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": args.broker}, None,
                   lambda addr, answer: (
                       f"wipe write perm of broker[{args.broker}] in name server[{addr}] OK, "
                       f"{_count(answer, 'wipeTopicCount')}", {"wipeTopicCount": _count(answer, "wipeTopicCount")}))


def add_write_perm(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    return on_each(namesrvs, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": args.broker}, None,
                   lambda addr, answer: (
                       f"add write perm of broker[{args.broker}] in name server[{addr}] OK, "
                       f"{_count(answer, 'addTopicCount')}", {"addTopicCount": _count(answer, "addTopicCount")}))


def delete_topic(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    ext = {"topic": args.topic}
    if args.cluster is not None:
        ext["clusterName"] = args.cluster
    where = "" if args.cluster is None else f" of cluster [{args.cluster}]"
    return on_each(namesrvs, RequestCode.DELETE_TOPIC_IN_NAMESRV, ext, None, lambda addr, answer: (
        f"delete topic [{args.topic}]{where} from name server[{addr}] OK", {}))
