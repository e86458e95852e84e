"""How many times a NameServer started on its data directory, counted in ``starts.json`` beside the
KV store and served as ``namesrv_starts_total``.

A NameServer that dies within seconds of each start, again and again (an OOM kill under a memory
limit too small for its brokers, a crash on the first registration of a broker), is up between
scrapes or not at all: ``up`` and ``process_start_time_seconds`` see only the starts a scrape
happened to meet, and a loop faster than the scrape interval looks like a NameServer that answers
now and then.  Kept in the data directory, the count survives the process: the first scrape after
any start sees every start before it, scraped or not, and ``NamesrvRestarting``
(deploy/monitoring/namesrv-alerts.yaml) alerts on three more within 15 minutes.

Counted once the ports are bound and the data directory locked (data_lock.py: one server counts in
it at a time): a start that cannot bind leaves no data directory behind, and ``NamesrvDown`` says
it (nothing answers).  The file fails as the stores do: one that does not read (corrupt, not a
regular file, too big) starts the count again, a warning and a count in
``namesrv_store_load_refusals_total{store="starts"}``; a save that fails (a full disk, a read-only
volume) is a warning and a count in ``namesrv_store_write_failures_total{store="starts"}``, and the
server starts all the same, the count then this run's alone.

A start is *unclean* when the run before it did not stop cleanly: the file says "running" from each
start until the clean stop's last step (SIGTERM, SIGINT, SIGHUP: the listeners closed, the stores'
last writes made) says otherwise, so a run killed (SIGKILL, an OOM kill), crashed or cut off by a
power loss leaves it saying "running", and the next start counts one more in ``unclean``
(``namesrv_unclean_starts_total``).  ``NamesrvRestarting`` counts those: three rolling restarts
within 15 minutes (an upgrade, a rollback, a configuration change: every NameServer stopped
cleanly three times) paged critical on every NameServer, "it keeps dying".

The clean stop's mark needs no free space: its content is known at the start, so it is written then,
beside the file (``starts.json.stopped``), and the clean stop renames it over ``starts.json``.  A
stop on a full disk is a clean stop whose last writes failed (the stores' failures are counted and
NamesrvStoreNotWritten says them), not a crash: before, its mark, written at the stop, failed for lack
of space, and three rolling restarts on a full disk paged NamesrvRestarting beside
NamesrvStoreNotWritten.  Only when the mark was not prepared (the start's writes failed too) is it
written at the stop, and a failure then is a warning and a count: the next start reads the file as
the run before left it.  A file written before this count (``{"starts": N}`` alone) counts its last
run clean."""

from __future__ import annotations

import json
import os
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import NamedTuple

from twisted.logger import Logger

from .state.config import NamesrvConfig
from .state.files import FileTooBig, NotRegularFile, errno_name, read_regular
from .state.store import StoreError, fsync_directory, write_atomically

log = Logger()

STARTS_FILE = "starts.json"
#: the clean stop's mark, prepared at the start beside the file and renamed over it at the clean stop
STOPPED_SUFFIX = ".stopped"
#: the store's name in the metrics' ``store`` label
STORE = "starts"
#: what the file may hold (a few dozen bytes are written)
LIMIT = 4096


def starts_path(config: NamesrvConfig) -> Path:
    """``starts.json`` beside the KV store (the data directory)."""
    return Path(config["kvConfigPath"]).with_name(STARTS_FILE)


class Counted(NamedTuple):
    """What ``starts.json`` says once this start is counted."""

    #: starts on the directory, this one included
    starts: int
    #: starts after a run that did not stop cleanly, this one included if so
    unclean: int


def count_start(path: Path, failures: Counter[tuple[str, str]], refusals: Counter[tuple[str, str]]) -> Counted:
    """This start counted in ``path`` (the starts before it, 0 for none or a file not read, plus one;
    one more unclean start if the run before it did not stop cleanly), written back as running."""
    before, running = _read(path, refusals)
    counted = Counted(before.starts + 1, before.unclean + (1 if running else 0))
    if running:
        log.warn("started {unclean}: its log's last lines say how far it got; an OOM kill shows in dmesg or "
                 "the pod's lastState (namesrv_unclean_starts_total {count})", unclean=UNCLEAN, count=counted.unclean)
    prepared = _stopped(path)
    with suppress(OSError):  # a crashed run's: never renamed over this run's count
        prepared.unlink()
    if _write(path, counted, True, failures, "namesrv_starts_total counts this run's start only"):
        _write(prepared, counted, False, failures, "the clean stop's mark is written at the stop instead")
    return counted


def _stopped(path: Path) -> Path:
    return path.with_name(path.name + STOPPED_SUFFIX)


#: what the page's "started" event and the start's warning say of a run that did not stop cleanly
UNCLEAN = ("after a run that did not stop cleanly (killed, crashed, OOM-killed or the power lost; or stopped on a "
           "read-only data directory, where its clean stop could not be marked: its log's last lines then say "
           "\"the clean stop is not marked\")")


def last_run_unclean(path: Path) -> bool:
    """Whether ``path`` says its last run did not stop cleanly, read before the start is counted (the
    page's "started" event is made first); a file that does not read says nothing here (count_start
    says it and counts it)."""
    try:
        return json.loads(read_regular(path, LIMIT)).get("running") is True
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return False


def count_clean_stop(path: Path, counted: Counted, failures: Counter[tuple[str, str]]) -> None:
    """The clean stop's mark: the run counted as ``counted`` is not running any more.  The mark
    prepared at the start is renamed over the file, which takes no space on a full disk; only
    without it is the mark written now."""
    prepared = _stopped(path)
    try:
        os.replace(prepared, path)
    except OSError:
        _write(path, counted, False, failures, "the clean stop is not marked: the next start may count it unclean")
        return
    # the rename made durable; a directory that cannot be synced (no descriptor left) keeps the
    # rename the page cache holds, which a clean stop suffices for
    with suppress(OSError):
        fsync_directory(path.parent)


def _write(path: Path, counted: Counted, running: bool, failures: Counter[tuple[str, str]], meaning: str) -> bool:
    """Whether ``path`` now holds the count; a failure is a warning and a count."""
    content = {"starts": counted.starts, "unclean": counted.unclean, "running": running}
    try:
        write_atomically(path, json.dumps(content).encode(), STORE)
    except StoreError as exc:
        failures[STORE, exc.errno_name] += 1
        log.warn("{error}; {meaning}", error=str(exc), meaning=meaning)
        return False
    return True


def _read(path: Path, refusals: Counter[tuple[str, str]]) -> tuple[Counted, bool]:
    """The counts ``path`` holds and whether its last run was still running (did not stop cleanly):
    none without the file (a first start) and, said and counted, for one that is not a count this
    server writes; a file of a server before the clean stops' mark (``starts`` alone): not running."""
    try:
        content = json.loads(read_regular(path, LIMIT))
        starts, unclean, running = content["starts"], content.get("unclean", 0), content.get("running", False)
    except FileNotFoundError:
        return Counted(0, 0), False
    except FileTooBig:
        reason = "too_big"
    except NotRegularFile:
        reason = "not_regular"
    except OSError as exc:
        reason = f"unreadable: {errno_name(exc)}"
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # (nested too deeply: within 4 KiB)
        reason = "corrupt"
    else:
        if _count(starts) and _count(unclean) and type(running) is bool:
            return Counted(starts, unclean), running
        reason = "corrupt"
    log.warn("{path} is not read ({reason}): namesrv_starts_total starts again", path=str(path), reason=reason)
    refusals[STORE, reason.partition(":")[0]] += 1
    return Counted(0, 0), False


def _count(value: object) -> bool:
    return type(value) is int and value >= 0
