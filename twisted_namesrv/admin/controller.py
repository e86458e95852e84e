"""``namesrv-admin`` subcommands for RocketMQ 5.x's controller (mqadmin's, with ``-a``): they ask
the controllers of ``-a`` for the leader (CONTROLLER_GET_METADATA_INFO) and send to it, as
mqadmin does; a controller's non-SUCCESS answer (2007 not leader, 2009 clean refused, ...) is an
error with its remark."""

from __future__ import annotations

import argparse
from typing import Any

from .. import properties
from ..controller.codes import ControllerRequestCode as Req
from ..controller.codes import ControllerResponseCode as Code
from ..remoting import RemotingCommand
from .client import AdminError, NamesrvClient, Namesrvs, answer_read, json_body
from .commands import Outcome


def _leader(controllers: Namesrvs) -> NamesrvClient:
    """The leader named by the first controller that answers 1005 (itself when it leads)."""
    addr, meta = controllers.ask_any(Req.CONTROLLER_GET_METADATA_INFO)
    leader = meta.ext.get("controllerLeaderAddress")
    if meta.ext.get("isLeader") == "true" or not leader:
        return next(c for c in controllers.clients if c.addr == addr)
    known = next((c for c in controllers.clients if c.addr == leader), None)
    if known is None:  # signed and over TLS as the others are
        first = controllers.clients[0]
        known = NamesrvClient(leader, first.timeout, first.credentials, first.tls, first.sign_reads, first.fan_out)
        controllers.clients.append(known)  # closed with the others
    return known


def _ok(client: NamesrvClient, code: int, ext: dict[str, str] | None = None,
        body: bytes | None = None) -> RemotingCommand:
    response = client.call(code, ext, body)
    if response.code != 0:
        raise AdminError(f"{client.addr}: {_name(Req, code)} failed: {_name(Code, response.code)} "
                         f"({response.code}): {response.remark}")
    return response


def _name(enum: Any, code: int) -> str:
    try:
        return str(enum(code).name)
    except ValueError:
        return str(code)


def get_controller_metadata(controllers: Namesrvs, args: argparse.Namespace) -> Outcome:
    addr, meta = controllers.ask_any(Req.CONTROLLER_GET_METADATA_INFO)
    ext = dict(meta.ext)
    lines = [f"#ControllerGroup\t{ext.get('group')}", f"#ControllerLeaderId\t{ext.get('controllerLeaderId')}",
             f"#ControllerLeaderAddress\t{ext.get('controllerLeaderAddress')}"]
    lines += [f"#Peer:\t{peer}" for peer in (ext.get("peers") or "").split(";") if peer]
    return Outcome(ext, "\n".join(lines))


def get_sync_state_set(controllers: Namesrvs, args: argparse.Namespace) -> Outcome:
    leader = _leader(controllers)
    names = [n.strip() for n in args.broker.split(",") if n.strip()]
    body = ("[" + ",".join(f'"{n}"' for n in names) + "]").encode()
    response = _ok(leader, Req.CONTROLLER_GET_SYNC_STATE_DATA, body=body)
    with answer_read(leader.addr, "CONTROLLER_GET_SYNC_STATE_DATA"):
        return _sync_state_sets(json_body(leader.addr, response).get("replicasInfoTable") or {}, names)


def _sync_state_sets(table: dict[str, Any], names: list[str]) -> Outcome:
    lines: list[str] = []
    for name, info in table.items():
        lines += ["", f"#brokerName\t{name}", f"#MasterBrokerId\t{info.get('masterBrokerId')}",
                  f"#MasterAddr\t{info.get('masterAddress')}", f"#MasterEpoch\t{info.get('masterEpoch')}",
                  f"#SyncStateSetEpoch\t{info.get('syncStateSetEpoch')}",
                  f"#SyncStateSetNums\t{len(info.get('inSyncReplicas') or [])}"]
        for kind, key in (("InSyncReplica", "inSyncReplicas"), ("NotInSyncReplica", "notInSyncReplicas")):
            for r in info.get(key) or []:
                lines += ["", f"{kind}:\tReplicaIdentity{{brokerName='{r.get('brokerName')}', brokerId="
                              f"{r.get('brokerId')}, brokerAddress='{r.get('brokerAddress')}', alive="
                              f"{str(r.get('alive')).lower()}}}"]
    missing = [n for n in names if n not in table]
    return Outcome(table, "\n".join(lines), [f"no broker group {n} at the controller" for n in missing])


def re_elect_master(controllers: Namesrvs, args: argparse.Namespace) -> Outcome:
    leader = _leader(controllers)
    response = _ok(leader, Req.CONTROLLER_ELECT_MASTER, {
        "clusterName": args.cluster, "brokerName": args.broker, "brokerId": args.brokerId,
        "designateElect": "true"})
    ext = dict(response.ext)
    text = (f"reElectMaster success, brokerName={args.broker}, masterBrokerId={ext.get('masterBrokerId')}, "
            f"masterAddress={ext.get('masterAddress')}, masterEpoch={ext.get('masterEpoch')}, "
            f"syncStateSetEpoch={ext.get('syncStateSetEpoch')}")
    return Outcome(ext, text)


def clean_broker_metadata(controllers: Namesrvs, args: argparse.Namespace) -> Outcome:
    leader = _leader(controllers)
    ext = {"clusterName": args.cluster, "brokerName": args.broker, "brokerControllerIdsToClean": args.brokerIds,
           "isCleanLivingBroker": "true" if args.cleanLivingBroker else "false"}
    _ok(leader, Req.CLEAN_BROKER_DATA, {k: v for k, v in ext.items() if v is not None})
    return Outcome({"cleaned": args.broker}, f"clear broker {args.broker} metadata from controller success!")


def get_controller_config(controllers: Namesrvs, args: argparse.Namespace) -> Outcome:
    data: dict[str, Any] = {}
    lines: list[str] = []
    for client in controllers.clients:
        body = bytes(_ok(client, Req.GET_CONTROLLER_CONFIG).body or b"").decode("utf-8", "replace")
        try:
            data[client.addr] = properties.load(body)
        except ValueError as exc:
            raise AdminError(f"{client.addr}: config body is not properties text: {exc}") from None
        lines += [f"============{client.addr}============", *(f"{k:<50}=  {v}" for k, v in data[client.addr].items())]
    return Outcome(data, "\n".join(lines))


def update_controller_config(controllers: Namesrvs, args: argparse.Namespace) -> Outcome:
    errors = []
    for client in controllers.clients:
        try:
            _ok(client, Req.UPDATE_CONTROLLER_CONFIG, body=f"{args.key}={args.value}\n".encode())
        except AdminError as exc:
            errors.append(str(exc))
    return Outcome({"key": args.key, "value": args.value}, "" if errors else
                   f"update controller config success! {args.key}={args.value}", errors)


#: name: (function, help, [(flags, dest, help, required or None for a flag)])
CONTROLLER_SUBCOMMANDS: dict[str, tuple[Any, str, list[tuple[str, str, str, bool | None]]]] = {
    "getControllerMetaData": (get_controller_metadata, "the controller group, its leader and peers (1005)", []),
    "getSyncStateSet": (get_sync_state_set, "a broker group's master, epochs and sync-state set (1006)",
                        [("-b", "broker", "broker name(s), comma-separated", True)]),
    "reElectMaster": (re_elect_master, "make this broker its group's master (1002, designated)",
                      [("-c", "cluster", "cluster name", True), ("-b", "broker", "broker name", True),
                       ("-i", "brokerId", "the broker id to elect", True)]),
    "cleanBrokerMetadata": (clean_broker_metadata, "forget a broker group, or some of its ids (1011)",
                            [("-c", "cluster", "cluster name", False), ("-b", "broker", "broker name", True),
                             ("-i", "brokerIds", "broker ids to clean, ';'-separated (default: the whole group)",
                              False),
                             ("-l", "cleanLivingBroker", "clean even brokers that are alive", None)]),
    "getControllerConfig": (get_controller_config, "the configuration of every controller of -a (1010)", []),
    "updateControllerConfig": (update_controller_config, "set one key on every controller of -a (1009)",
                               [("-k", "key", "config key", True), ("-v", "value", "config value", True)]),
}
