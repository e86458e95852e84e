"""The subcommands: mqadmin's request for each, answered as a table like mqadmin's or as JSON.

Reads (clusterList, topicRoute, topicList, getKvConfig, getKvList) ask the first NameServer
of ``-n`` that answers; the operations mqadmin applies to every NameServer (KV and config
updates, write permissions, deleteTopic, getNamesrvConfig) go to each, one line per server.
Where a NameServer answers SUCCESS whatever happened (a config key it ignores, a KV key that
was not there), a read around the request tells what did.  Each function returns an
``Outcome``; any error in it makes the exit code 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import properties
from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.values import parse_java_integer
from .client import AdminError, NamesrvClient, Namesrvs, ResponseError, answer_read, json_body
from .terminal import json_text, printable


@dataclass
class Outcome:
    data: Any  # what --json prints
    text: str  # what a human reads
    errors: list[str] = field(default_factory=list)  # each goes to stderr; any means exit 1


def table(widths: tuple[int, ...], rows: list[tuple[Any, ...]]) -> str:
    """Columns padded like Java's ``%-Ns``, two spaces apart."""
    lines = ["  ".join(f"{printable(cell):<{width}}" for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    return "\n".join(lines)


# -- reads: the first NameServer that answers --------------------------------------------------

def cluster_list(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    addr, response = namesrvs.ask_any(RequestCode.GET_BROKER_CLUSTER_INFO)
    info = json_body(addr, response)
    rows: list[tuple[Any, ...]] = [("#Cluster Name", "#Broker Name", "#BID", "#Addr")]
    with answer_read(addr, "GET_BROKER_CLUSTER_INFO"):
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
    return Outcome(route, json_text(route, indent=4))


def topic_list(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    if args.cluster is None:
        addr, response = namesrvs.ask_any(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    else:
        addr, response = namesrvs.ask_any(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": args.cluster})
    body = json_body(addr, response)
    with answer_read(addr, "the topic list"):
        topics = sorted(body.get("topicList") or [])
        return Outcome(dict(body, topicList=topics), "\n".join(map(printable, topics)))


def get_kv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    ext = {"namespace": args.namespace, "key": args.key}
    addr, response = namesrvs.ask_any(RequestCode.GET_KV_CONFIG, ext)
    value = response.ext.get("value")
    return Outcome(dict(ext, value=value), printable(value))


def get_kv_list(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    addr, response = namesrvs.ask_any(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": args.namespace})
    with answer_read(addr, "GET_KVLIST_BY_NAMESPACE"):
        kv = json_body(addr, response).get("table") or {}
        rows = [("#Key", "#Value"), *sorted(kv.items())]
    return Outcome({"namespace": args.namespace, "table": kv}, table((50, 0), rows))


# -- operations on each NameServer -------------------------------------------------------------

Step = Callable[[NamesrvClient], tuple[str | list[str], dict[str, Any]]]


def on_each(namesrvs: Namesrvs, step: Step) -> Outcome:
    """``step(client)`` on every NameServer: the success line (or lines) and JSON fields of its
    result, or an AdminError that becomes that server's error while the others still run.  Each
    line is shown with its control characters escaped, a newline in a value included: a line
    quotes the operator's arguments and the NameServer's values."""
    lines: list[str] = []
    results, errors = [], []
    for client in namesrvs.clients:
        try:
            line, fields = step(client)
        except AdminError as exc:
            errors.append(str(exc))
            results.append({"namesrv": client.addr, "ok": False, "error": str(exc)})
            continue
        lines += map(printable, [line] if isinstance(line, str) else line)
        results.append({"namesrv": client.addr, "ok": True, **fields})
    return Outcome({"results": results}, "\n".join(lines), errors)


def update_kv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    def step(client: NamesrvClient) -> tuple[str, dict[str, Any]]:
        client.call_ok(RequestCode.PUT_KV_CONFIG, {"namespace": args.namespace, "key": args.key, "value": args.value})
        return (f"create or update kv config [{args.namespace}] {args.key}={args.value} "
                f"in name server[{client.addr}] OK"), {}

    return on_each(namesrvs, step)


def delete_kv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    """DELETE_KV_CONFIG answers SUCCESS whether or not the key was there, so the key is read
    first: an absent key is said so, and is no error (the key is gone, as asked)."""
    ext = {"namespace": args.namespace, "key": args.key}

    def step(client: NamesrvClient) -> tuple[str, dict[str, Any]]:
        before = client.call(RequestCode.GET_KV_CONFIG, ext)
        if before.code not in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND):
            raise ResponseError(client.addr, RequestCode.GET_KV_CONFIG, before)
        client.call_ok(RequestCode.DELETE_KV_CONFIG, ext)
        if before.code == ResponseCode.QUERY_NOT_FOUND:
            return (f"kv config [{args.namespace}] {args.key} was not in name server[{client.addr}]: "
                    "nothing to delete"), {"deleted": False}
        return f"delete kv config [{args.namespace}] {args.key} from name server[{client.addr}] OK", {"deleted": True}

    return on_each(namesrvs, step)


def read_config(client: NamesrvClient) -> dict[str, str]:
    """GET_NAMESRV_CONFIG's properties text as a dict."""
    answer = client.call_ok(RequestCode.GET_NAMESRV_CONFIG)
    try:
        return properties.load(bytes(answer.body or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise AdminError(f"{client.addr}: config body is not properties text: {exc}") from None


def get_namesrv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    def step(client: NamesrvClient) -> tuple[str | list[str], dict[str, Any]]:
        config = read_config(client)
        lines = [f"============{client.addr}============"]
        lines += [f"{printable(key):<50}=  {config[key]}" for key in sorted(config)]
        return lines, {"config": config}

    return on_each(namesrvs, step)


def update_namesrv_config(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    """UPDATE_NAMESRV_CONFIG as mqadmin sends it, between two reads of the config.  Java answers
    SUCCESS for a key it does not have (and ignores it) and for a value its field cannot parse
    (and keeps or coerces it), so only the config read back tells whether the update took; the
    one read before gives the value it replaced (what to set back).  A SUCCESS with a remark is ours
    applying a change its file could not take (a read-only ConfigMap: until the restart): said too."""
    body = properties.dump_line(args.key, args.value, ascii_only=True).encode("ascii")

    def step(client: NamesrvClient) -> tuple[str, dict[str, Any]]:
        before = read_config(client).get(args.key)
        answer = client.call_ok(RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
        after = read_config(client).get(args.key)
        if after is None:
            raise AdminError(f"{client.addr}: {args.key} is not a configuration key of this NameServer: it answered "
                             "OK but ignores the key (getNamesrvConfig lists its keys)")
        if not _took(args.value, after):
            raise AdminError(f"{client.addr}: {args.key} did not take {args.value!r}: it reads back as {after!r}")
        said = f"update name server config in name server[{client.addr}] OK: {args.key} = {after} (was {before})"
        result = {"key": args.key, "before": before, "after": after}
        if answer.remark:
            said += f"; {answer.remark}"
            result["unsaved"] = answer.remark
        return said, result

    return on_each(namesrvs, step)


def _took(sent: str, now: str) -> bool:
    """Whether a value read back is the one sent, as Java stores it: parsed by the field's type
    and printed again (``TRUE`` reads back ``true``, ``010`` reads back ``10``)."""
    if sent == now or (sent.lower() in ("true", "false") and sent.lower() == now):
        return True
    try:
        return int(sent) == int(now)
    except ValueError:
        return False


def _count(answer: RemotingCommand, name: str) -> int | None:
    """A count the answer's header carries, read as Java reads an Integer field (None when it is none:
    ``²`` passed str.isdigit, and int() raised a traceback out of the CLI)."""
    return parse_java_integer(answer.ext.get(name), 32)


def _write_perm(namesrvs: Namesrvs, broker: str, code: int, verb: str, count_name: str) -> Outcome:
    """Java answers SUCCESS with a count of 0 for a broker name it does not know (a typo looks like
    success), so a count of 0 is read back against the registered brokers."""
    def step(client: NamesrvClient) -> tuple[str, dict[str, Any]]:
        answer = client.call_ok(code, {"brokerName": broker})
        count = _count(answer, count_name)
        if count is None:
            raise AdminError(f"{client.addr}: its answer is not shaped as a NameServer's: {count_name} "
                             f"{answer.ext.get(count_name)!r} is no count")
        if count == 0 and not _registered(client, broker):
            raise AdminError(f"{client.addr}: no broker named {broker} is registered (clusterList lists them)")
        return f"{verb} write perm of broker[{broker}] in name server[{client.addr}] OK, {count}", {count_name: count}

    return on_each(namesrvs, step)


def _registered(client: NamesrvClient, broker: str) -> bool:
    """Whether ``broker`` is a broker name of the NameServer's cluster info (brokerAddrTable)."""
    info = json_body(client.addr, client.call_ok(RequestCode.GET_BROKER_CLUSTER_INFO))
    with answer_read(client.addr, "GET_BROKER_CLUSTER_INFO"):
        return broker in (info.get("brokerAddrTable") or {})


def wipe_write_perm(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    return _write_perm(namesrvs, args.broker, RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipe", "wipeTopicCount")


def add_write_perm(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    return _write_perm(namesrvs, args.broker, RequestCode.ADD_WRITE_PERM_OF_BROKER, "add", "addTopicCount")


def delete_topic(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    ext = {"topic": args.topic}
    if args.cluster is not None:
        ext["clusterName"] = args.cluster
    where = "" if args.cluster is None else f" of cluster [{args.cluster}]"

    def step(client: NamesrvClient) -> tuple[str, dict[str, Any]]:
        client.call_ok(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)
        return f"delete topic [{args.topic}]{where} from name server[{client.addr}] OK", {}

    return on_each(namesrvs, step)


def retire_broker_group(namesrvs: Namesrvs, args: argparse.Namespace) -> Outcome:
    """RETIRE_BROKER_GROUP (this NameServer's own request): forget a cluster, a broker group or one
    of its member ids that was removed on purpose, so it is no longer expected (no longer an
    outage).  Each NameServer remembers what it saw, so each is asked; one that does not remember
    it answers QUERY_NOT_FOUND, which is said and is no error (it is not expected there either)."""
    ext = {"clusterName": args.cluster}
    if args.broker is not None:
        ext["brokerName"] = args.broker
    if args.broker_id is not None:
        ext["brokerId"] = args.broker_id
    what = args.cluster if args.broker is None else f"{args.cluster}/{args.broker}"
    what += "" if args.broker_id is None else f" id {args.broker_id}"

    def step(client: NamesrvClient) -> tuple[str, dict[str, Any]]:
        answer = client.call(RequestCode.RETIRE_BROKER_GROUP, ext)
        if answer.code == ResponseCode.QUERY_NOT_FOUND:
            return f"{what} is not remembered by name server[{client.addr}]: nothing to retire", {"retired": None}
        if answer.code != ResponseCode.SUCCESS:
            raise ResponseError(client.addr, RequestCode.RETIRE_BROKER_GROUP, answer)
        retired = answer.ext.get("retired") or what
        return f"retired {retired} in name server[{client.addr}] OK", {"retired": retired}

    return on_each(namesrvs, step)
