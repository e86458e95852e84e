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
server starts all the same, the count then this run's alone."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from twisted.logger import Logger

from .state.config import NamesrvConfig
from .state.files import FileTooBig, NotRegularFile, errno_name, read_regular
from .state.store import StoreError, write_atomically

log = Logger()

STARTS_FILE = "starts.json"
#: the store's name in the metrics' ``store`` label
STORE = "starts"
#: what the file may hold (a few dozen bytes are written)
LIMIT = 4096


def starts_path(config: NamesrvConfig) -> Path:
    """``starts.json`` beside the KV store (the data directory)."""
    return Path(config["kvConfigPath"]).with_name(STARTS_FILE)


def count_start(path: Path, failures: Counter[tuple[str, str]], refusals: Counter[tuple[str, str]]) -> int:
    """This start counted in ``path``: the starts before it (0 for none, or a file not read) plus
    one, written back; the count."""
    started = _read(path, refusals) + 1
    try:
        write_atomically(path, json.dumps({"starts": started}).encode(), STORE)
    except StoreError as exc:
        failures[STORE, exc.errno_name] += 1
        log.warn("{error}; namesrv_starts_total counts this run's start only", error=str(exc))
    return started


def _read(path: Path, refusals: Counter[tuple[str, str]]) -> int:
    """The starts ``path`` counts: 0 without the file (a first start), and, said and counted, for
    one that is not a count this server writes."""
    try:
        starts = json.loads(read_regular(path, LIMIT))["starts"]
    except FileNotFoundError:
        return 0
    except FileTooBig:
        reason = "too_big"
    except NotRegularFile:
        reason = "not_regular"
    except OSError as exc:
        reason = f"unreadable: {errno_name(exc)}"
    except (ValueError, TypeError, KeyError, RecursionError):  # (nested too deeply: within 4 KiB it can be)
        reason = "corrupt"
    else:
        if type(starts) is int and starts >= 0:
            return starts
        reason = "corrupt"
    log.warn("{path} is not read ({reason}): namesrv_starts_total starts again", path=str(path), reason=reason)
    refusals[STORE, reason.partition(":")[0]] += 1
    return 0
