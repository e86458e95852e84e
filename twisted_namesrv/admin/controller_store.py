"""``namesrv-admin controller-export`` / ``controller-import``: this controller's store as Java
5.3.3's DLedger controller store, and back (controller/java_store.py), for the way back from our
controller to Java's and forward again (docs/controller.md#back-to-javas-controller).

Both work on stopped controllers' files, never over the network: the export reads our
``controller.log`` and writes ``<Java's controllerStorePath>/dledger-<selfId>/``; the import reads
that and writes a new ``controller.log``.  Each first checks that what it writes rebuilds exactly
the state it read, then prints every broker group's state (ids, master, epochs, sync-state set),
which is what the brokers must find when they come back.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from ..controller import java_store
from ..controller.events import EventMessage, decode_event, encode_event
from ..controller.log import ControllerLogError, read_log, write_log
from ..controller.replicas import ReplicasInfoManager
from .terminal import json_text, printable

COMMANDS = ("controller-export", "controller-import")


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = subparsers.add_parser(
        "controller-export", help="write a stopped controller's state as Java 5.3.3's DLedger controller store",
        description="Reads this controller's log (controllerStorePath/controller.log, the controller stopped) and "
                    "writes Java's DLedger store, dledger-SELFID under --to (Java's controllerStorePath), that "
                    "rebuilds the same broker ids, masters, epochs and sync-state sets. Exit 1 when it cannot.")
    export.add_argument("--store", required=True, help="this controller's controllerStorePath (holds controller.log)")
    export.add_argument("--to", required=True, help="Java's controllerStorePath")
    export.add_argument("--self-id", default="n0", help="Java's controllerDLegerSelfId (default n0); for several "
                        "DLedger peers, export once per peer")
    export.add_argument("--mapped-file-size", type=int, default=java_store.DEFAULT_DATA_FILE_SIZE,
                        help="Java's mappedFileSize (default 1073741824, Java's): DLedger loads only data files "
                             "of exactly this size")
    export.add_argument("--json", action="store_true", help="machine-readable JSON output")
    imported = subparsers.add_parser(
        "controller-import", help="write Java 5.3.3's DLedger controller store as this controller's log",
        description="Reads Java's DLedger store (dledger-SELFID under --from, the Java controller stopped) and "
                    "writes this controller's log (controller.log under --store, which must not hold one). "
                    "Exit 1 when it cannot.")
    imported.add_argument("--from", dest="source", required=True, help="Java's controllerStorePath")
    imported.add_argument("--self-id", default="n0", help="Java's controllerDLegerSelfId (default n0)")
    imported.add_argument("--store", required=True, help="this controller's controllerStorePath")
    imported.add_argument("--json", action="store_true", help="machine-readable JSON output")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        if args.command == "controller-export":
            state, written, where = export(Path(args.store), Path(args.to), args.self_id, args.mapped_file_size)
        else:
            state, written, where = import_(Path(args.source), args.self_id, Path(args.store))
    except (java_store.JavaStoreError, ControllerLogError, OSError) as exc:
        err.write(f"error: {printable(str(exc))}\n")
        return 1
    if args.json:
        out.write(json_text({"written": str(where), "events": written, "groups": state.summary()}) + "\n")
    else:
        out.write(f"wrote {written} events to {where}\n" + describe(state))
    return 0


def export(store: Path, to: Path, self_id: str, mapped_file_size: int) -> tuple[ReplicasInfoManager, int, Path]:
    ours = replay(read_log(store))
    events = java_store.java_events(read_log(store))
    java_store.check_same_state(ours, events)
    peer = java_store.peer_directory(to, self_id)
    java_store.write_dledger(peer, [java_store.java_event_bytes(e) for e in events], mapped_file_size)
    return ours, len(events), peer


def import_(source: Path, self_id: str, store: Path) -> tuple[ReplicasInfoManager, int, Path]:
    peer = java_store.peer_directory(source, self_id)
    events = [e for e in map(java_store.event_from_java, java_store.read_dledger(peer)) if e is not None]
    state = replay(encode_event(e) for e in events)
    java_store.check_same_state(state, events)
    return state, len(events), write_log(store, [encode_event(e) for e in events])


def replay(entries: Iterable[bytes]) -> ReplicasInfoManager:
    state = ReplicasInfoManager()
    for entry in entries:
        event: EventMessage = decode_event(entry)
        state.apply_event(event)
    return state


def describe(state: ReplicasInfoManager) -> str:
    """One line per broker group: what its brokers will find when they register again."""
    lines = []
    for name, group in state.summary().items():
        brokers = ", ".join(f"{i}={a}" for i, a in group["brokers"].items())
        master = group["masterBrokerId"] if group["masterBrokerId"] is not None else "none"
        lines.append(f"{group['clusterName']}/{name}: brokers {brokers}; master {master}, masterEpoch "
                     f"{group['masterEpoch']}, syncStateSet {group['syncStateSet']} at epoch "
                     f"{group['syncStateSetEpoch']}; next id {state.replica_info_table[name].next_assign_broker_id}")
    return "".join(line + os.linesep for line in lines) or "no broker group\n"
