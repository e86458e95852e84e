"""The remembered topology (state/topology.py) on disk: ``topology.json`` beside the KV store
(``topologyPath`` says otherwise), so that a cluster seen before a restart is still expected after
it - a NameServer restarted while a cluster is down must not forget it either.

Written by state/store.py's write_atomically (a crash leaves the old file or the new one, never half
of one) at most every SAVE_SECONDS when the memory changed (in a thread: file_writer.py), at a
clean stop, and at once for an operator's retirement (``save_now``: a retirement that cannot be
saved is undone and answered with an error).  Read once at start with ``read_regular``: a FIFO, a
symlink, a file over FILE_LIMIT or one this server did not write is not loaded - logged, counted in
``namesrv_store_load_refusals_total{store="topologyPath"}``, and kept aside as ``.corrupt`` when it
is a damaged file - and the server starts with what the routes show.  It never refuses to start over it.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from twisted.internet import interfaces
from twisted.logger import Logger

from .file_writer import FileWriter
from .state.config import NamesrvConfig
from .state.files import errno_name
from .state.store import LoadRefused, StoreError, read_regular, set_aside
from .state.topology import KnownGroup, Topology, TopologyFileError, decode, encode, encode_group
from .timers import StepTimerService

log = Logger()
TOPOLOGY_FILE = "topology.json"
STORE = "topologyPath"
#: how often a changed memory is written (a kill -9 loses at most these seconds of it)
SAVE_SECONDS = 2.0
#: the largest file read back: GROUPS_LIMIT groups of MEMBERS_LIMIT members is about 20 MB
FILE_LIMIT = 32 << 20
#: hosts named in the line of groups not remembered past GROUPS_PER_HOST (the rest counted)
HOSTS_SHOWN = 8


def topology_path(config: NamesrvConfig) -> Path:
    """``topologyPath``, else ``topology.json`` beside the KV store (the data directory)."""
    configured = str(config["topologyPath"])
    return Path(configured) if configured else Path(config["kvConfigPath"]).with_name(TOPOLOGY_FILE)


class TopologyStoreService(StepTimerService):
    """Loads the memory before the start (``load``), writes it when changed and at a clean stop."""

    def __init__(self, topology: Topology, path: str | os.PathLike[str], clock: interfaces.IReactorTime,
                 load_refusals: Counter[tuple[str, str]], interval: float = SAVE_SECONDS,
                 failures: Counter[tuple[str, str]] | None = None, failing: dict[str, str] | None = None) -> None:
        """``failures``: its file's failed writes counted (file_writer.FileWriter), a retirement's and
        the stop's too."""
        super().__init__(interval, self.save_if_changed, clock)
        self.topology = topology
        self.path = Path(path)
        self.writer = FileWriter(clock, self.path, STORE, failures)
        self.load_refusals = load_refusals
        self._saved = -1
        self._failing = False
        #: the stores failing now (metrics.store_failing): this one's name in it while its writes fail
        self.failing: dict[str, str] = {} if failing is None else failing
        #: the last write's error, for the stop's line
        self._error: OSError | None = None
        self._refused_told = 0

    def load(self) -> int:
        """The groups of the last run, remembered again; how many."""
        try:
            data = read_regular(self.path, FILE_LIMIT)
            groups = {} if data is None else decode(data)
        except LoadRefused as exc:
            self._refused(exc.reason, f"{exc.why}; not loaded")
            return 0
        except TopologyFileError as exc:
            self._refused("corrupt", f"{exc}; kept as {set_aside(self.path)}")
            return 0
        self.topology.load(groups)
        self._saved = self.topology.version
        if groups:
            log.info("topology {path}: {groups} broker groups of {clusters} clusters expected, as last seen: "
                     "{how}", path=str(self.path), groups=len(groups), clusters=len(self.topology.clusters()),
                     how=as_left(groups, self.topology.up_at_start))
        return len(groups)

    def _refused(self, reason: str, why: str) -> None:
        self.load_refusals[STORE, reason] += 1
        self.topology.load_problem = f"{self.path}: {why}"
        log.error("topology file {path} refused: {why}; starting with only the broker groups that register",
                  path=str(self.path), why=why)

    def write_again(self) -> None:
        """The file is gone (its data directory removed while running): written at the next check,
        changed or not."""
        self._saved = -1

    def save_now(self) -> None:
        """Write the memory at once (after a write in flight); StoreError when it cannot be made durable."""
        version = self.topology.version
        self.writer.write_now(encode(self.topology))
        self._saved = version

    def save_if_changed(self, now: bool = False) -> None:
        """Write the memory when it changed since the last write: in a thread (file_writer.py), or
        ``now`` in this one (the stop)."""
        refused, hosts = self.topology.refused, self.topology.refused_hosts
        by_hosts = sum(hosts.values())
        if refused - by_hosts != self._refused_told:  # one line per check, however many were refused meanwhile
            log.error("{count} new broker groups not remembered: the topology holds its limit of {limit} groups "
                      "(retire those removed on purpose)", count=refused - by_hosts - self._refused_told,
                      limit=self.topology.groups_limit)
        if hosts:
            shown = ", ".join(f"{host} ({count})" for host, count in hosts.most_common(HOSTS_SHOWN))
            more = f" and {len(hosts) - HOSTS_SHOWN} more hosts" if len(hosts) > HOSTS_SHOWN else ""
            log.error("{count} new broker groups not remembered: their hosts brought {per_host} groups each since "
                      "this start, the most one host may: {hosts}{more} (routed all the same; retire those removed "
                      "on purpose)", count=by_hosts, per_host=self.topology.groups_per_host, hosts=shown, more=more)
            hosts.clear()
        self._refused_told = self.topology.refused
        version = self.topology.version
        if version == self._saved or (self.writer.in_flight and not now):
            return
        if not now:
            self.writer.write_soon(encode(self.topology), lambda error: self._written(version, error))
            return
        try:
            self.save_now()
        except StoreError as exc:
            self._written(version, exc)
            return
        self._written(version, None)

    def _written(self, version: int, error: OSError | None) -> None:
        if error is not None:
            self._error = error
            if not self._failing:  # once per failing spell
                log.error("cannot write topology file {path}: {error}; groups seen since will be forgotten by a "
                          "restart until it can", path=str(self.path), error=str(error))
            self._failing = True
            self.failing[STORE] = errno_name(error)
            return
        if self._failing:
            log.info("topology file {path} written again", path=str(self.path))
        self._failing = False
        self.failing.pop(STORE, None)
        self._saved = max(self._saved, version)

    def stopService(self) -> Any:
        stopped = super().stopService()
        self.save_if_changed(now=True)
        if self.topology.version != self._saved:
            self._lost_at_stop()
        return stopped

    def _lost_at_stop(self) -> None:
        """The stop's write failed: say what the restart will not know, told against the file as it
        was last written (whole: write_atomically), read back here, so that no save has to keep a
        copy of every group's entry for a stop that may never fail (a group loaded at start and up
        then counts as changed until a write succeeds: the file still has it up)."""
        entries = self.topology.encoded
        try:
            data = read_regular(self.path, FILE_LIMIT)
            in_file = {} if data is None else {key: encode_group(group) for key, group in decode(data).items()}
        except (TopologyFileError, OSError) as exc:  # LoadRefused among them
            log.error("topology file {path} not written at the stop ({error}), nor readable ({why}): what the "
                      "restart will expect is not known", path=str(self.path), error=str(self._error),
                      why=str(getattr(exc, "why", exc)))
            return
        new = sorted(key for key in entries if key not in in_file)
        changed = sum(key in in_file and in_file[key] != entry for key, entry in entries.items())
        shown = ", ".join(f"{cluster}/{broker}" for cluster, broker in new[:20]) + (", ..." if len(new) > 20 else "")
        log.error("topology file {path} not written at the stop ({error}): {new} broker groups seen since its last "
                  "write will not be expected after the restart: {shown}; {changed} others changed since (members, "
                  "how they left) will be read back as they were", path=str(self.path), error=str(self._error),
                  new=len(new), shown=shown or "none", changed=changed)


def as_left(groups: dict[tuple[str, str], KnownGroup], up: set[tuple[str, str]]) -> str:
    """How the last run left them: those up (expected to register again) and those absent before
    it by how their last member left, named (five at most each), so that a restart's log says a
    cluster stopped cleanly before it, as the page and the alerts do."""
    def named(keys: list[tuple[str, str]]) -> str:
        names = [f"{cluster}/{broker}" for cluster, broker in sorted(keys)]
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    absent: dict[str, list[tuple[str, str]]] = {}
    for key, group in groups.items():
        if key not in up:
            absent.setdefault(group.how or "never registered", []).append(key)
    said = [f"{len(up)} up when it last stopped, expected to register again" if up else
            "none was up when it last stopped"]
    if absent:
        said.append("absent before it: " + "; ".join(
            f"{len(keys)} {'stopped cleanly (unregistered)' if how == 'unregistered' else f'left ({how})'}: "
            f"{named(keys)}" for how, keys in sorted(absent.items())))
    return "; ".join(said)
