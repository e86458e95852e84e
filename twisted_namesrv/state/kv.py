"""KVConfigManager: namespaced key/value pairs (e.g. ORDER_TOPIC_CONFIG), persisted after
every change as ``{"configTable":{namespace:{key:value}}}``, like Java's kvConfig.json.

A change is saved before it is made in memory: a save that fails (a full disk, no fd left, an
I/O error) hands its caller the StoreError and changes nothing, in memory or on disk.

Saving is the caller's ``save(data, saved)``, which may finish later (the service writes in a
thread: an fsync on a busy disk took 20-300 ms, and PUT_KV_CONFIG is any peer's without ACL, so one
peer's flood of puts held every lookup behind them).  One write is in flight at a time; the changes
accepted meanwhile are staged on top of it and written together by the next (one fsync for all of
them), each caller's ``saved`` called once the write holding its change is durable.  Reads see
the table as saved; a change that leaves the staged table as it is writes nothing.  A failed write
fails the changes staged after it too: they were staged on a table that never became durable.

What the table may hold is bounded (``maxKvBytes``, its encoded size): each change rewrites the
whole file, and PUT_KV_CONFIG is any peer's without ACL.  A change that would grow the staged
table past the bound raises KVLimitError and changes nothing; one that does not grow it is taken.
A namespace may be bounded on its own by the same rule (``bounds``: ORDER_TOPIC_CONFIG, which 5.x
hands whole to every broker in each registration answer), its encoded size counted change by change.

Each change is published to the subscribers as ``(namespace, key)`` once it is saved: an
ORDER_TOPIC_CONFIG key shows in its topic's route answers, which the answer cache drops."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..remoting import fastjson
from ..remoting.fastjson import java_hash_map
from .files import FileTooBig, read_regular
from .store import Save, Saved, StoreError

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
#: the largest KV file read at start: what Java's NameServer reads too (MixAll.file2String makes a
#: ``byte[(int) file.length()]``: a file of 2 GiB or more is a NegativeArraySizeException, no start).
#: Checked before a byte is read: a sparse file of 100 GB swapped in was read whole, then parsed
FILE_LIMIT = (1 << 31) - 1

Table = dict[str, dict[str, str]]


def _size_change(table: Table, namespace: str, key: str, value: str | None) -> int:
    """How many bytes ``encode`` of ``table`` grows by when ``key`` of ``namespace`` is set to
    ``value`` (None: removed; an emptied namespace stays, as ``{}``): exact, without encoding the
    table (a JSON object's size is its members' and the commas between them)."""
    entries = table.get(namespace)
    change = 0
    if entries is None:
        entries = {}
        change += len(fastjson.dumps_stored(namespace)) + 3 + (1 if table else 0)  # "ns":{} and its comma
    return change + _entries_change(entries, key, value)


def _entries_change(entries: dict[str, str], key: str, value: str | None) -> int:
    """How many bytes a namespace's own object (``{"key":"value",...}``) grows by when ``key`` is set
    to ``value`` (None: removed)."""
    change = 0
    old = entries.get(key)
    if old is not None:
        change -= _entry_size(key, old) + (1 if len(entries) > 1 else 0)
    if value is not None:
        change += _entry_size(key, value) + (1 if len(entries) - (old is not None) > 0 else 0)
    return change


def _entry_size(key: str, value: str) -> int:
    """``"key":"value"`` as the file holds it (``encode``)."""
    return len(fastjson.dumps_stored(key)) + 1 + len(fastjson.dumps_stored(value))


def read_table(data: bytes) -> Table:
    """The table of a KV file as Java's KVConfigManager reads it (fastjson 1.2.69 and 1.2.83 into
    KVConfigSerializeWrapper): a value that is not a string is the text fastjson fills a String with
    (``fastjson.java_string_field``: ``1.50``, ``true``, an object's JSON), a null value or namespace
    is left out (Java keeps it and then treats it as absent, and writes none), a document that is null
    or holds no configTable is an empty table; a namespace or configTable that is not an object is a
    ValueError, as Java's start fails on it.  Before, a value was Python's ``str()`` of it (``True``,
    ``{'a': 1}``, ``1000.0`` for ``1e3``), and a null namespace or document stopped the start."""
    obj = fastjson.loads(data)
    if not _strings_only(obj):  # a number, a bool, an object as a value: its literal text matters
        obj = fastjson.loads_keeping_numbers(data)
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"not a JSON object but {_json_kind(obj)}")
    table = obj.get("configTable")
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ValueError(f"configTable is not an object but {_json_kind(table)}")
    read: Table = {}
    for namespace, entries in table.items():
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise ValueError(f"namespace {namespace!r:.80} is not an object but {_json_kind(entries)}")
        read[namespace] = {key: text for key, value in entries.items()
                           if (text := fastjson.java_string_field(value)) is not None}
    return read


def as_utf8(data: bytes) -> tuple[bytes, str | None]:
    """A KV file's bytes as UTF-8, and why they were not (None when they were).  Java's NameServer
    writes and reads the file in the JVM's default charset (``new String(data)``): one that ran with
    ISO-8859-1 (a Java 8 under a Latin-1 locale) left ``é`` as the byte E9, which it read back as ``é``.
    Such a file stopped this server's start with Python's decoding error; it is read as ISO-8859-1
    instead, keeping every character (a JVM on UTF-8 would read U+FFFD there), and the next change
    writes it as UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (data.decode("latin-1").encode("utf-8"),
                f"byte 0x{data[exc.start]:02X} at offset {exc.start} is not UTF-8")
    return data, None


def _strings_only(obj: object) -> bool:
    """Whether every value of every namespace is a string or null (what this server and Java write)."""
    table = obj.get("configTable") if isinstance(obj, dict) else None
    return not isinstance(table, dict) or all(
        not isinstance(entries, dict) or all(value is None or type(value) is str for value in entries.values())
        for entries in table.values())


def _json_kind(value: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean"}.get(type(value), "a number")


class KVConfigError(Exception):
    """The persisted KV file exists but cannot be read: refuse to start rather than empty it."""


class KVLimitError(Exception):
    """A change that would grow the table past ``maxKvBytes``: refused, nothing changed."""


@dataclass
class _Batch:
    """Changes written together: the table they make, its encoded size, who waits for it and what
    changed.  Until it is written no one else reads its table (reads see the saved one), so the
    namespaces it copied (``own``) take its later changes in place; once handed to the writer (a
    thread encodes it) and after, neither it nor any of its namespaces' tables changes."""
    table: Table
    size: int
    #: the encoded sizes of the namespaces bounded on their own (KVConfigManager's ``bounds``) in ``table``
    bounded: dict[str, int]
    keys: list[tuple[str, str]] = field(default_factory=list)
    waiting: list[Saved] = field(default_factory=list)
    own: set[str] = field(default_factory=set)


class _Outcome:
    """What a caller without ``saved`` is told: the save must be done when the change returns."""

    def __init__(self) -> None:
        self.told = False
        self.error: StoreError | None = None

    def saved(self, error: StoreError | None) -> None:
        self.told, self.error = True, error

    def check(self) -> None:
        assert self.told, "a save in flight: give the change a saved callback"
        if self.error is not None:
            raise self.error


class KVConfigManager:
    def __init__(self, save: Save, limit: Callable[[], int] = lambda: 0,
                 bounds: dict[str, int] | None = None, save_again: Save | None = None) -> None:
        """``save(data, saved)`` saves the whole table (``at_once`` makes one of a plain write);
        ``limit()``: the most bytes its encoding may grow to (0: no limit); ``bounds``: the most bytes
        a namespace's own object may grow to, for the namespaces bounded on their own; ``save_again``:
        how ``write_again`` saves it (default ``save``: the service's counts its failures without a log
        line each, since it is tried again every few seconds while the disk is full)."""
        self.configTable: Table = {}
        self._save = save
        self._save_again = save_again or save
        #: the file is not known to hold the table as saved (its directory removed while running:
        #: ``write_again``) until a write of the whole table succeeds; a restart now would start without it
        self.missing = False
        #: why the file loaded was not read as UTF-8 (``as_utf8``), None when it was
        self.not_utf8: str | None = None
        #: why the last write while ``missing`` failed (a full disk), None when none did
        self.unwritten: str | None = None
        self._limit = limit
        self._bounds = dict(bounds or {})
        #: the encoded size of configTable as it was last saved (or loaded)
        self.size = len(self.encode())
        #: the encoded sizes of the bounded namespaces in configTable (``{}``, 2 bytes, when absent)
        self.bounded = self._measured(self.configTable)
        self._subscribers: list[Callable[[str, str], None]] = []
        #: the write in flight, and the changes accepted since it began (written by the next)
        self._writing: _Batch | None = None
        self._next: _Batch | None = None

    def subscribe(self, listener: Callable[[str, str], None]) -> None:
        """``listener(namespace, key)`` hears every key put or deleted from now on."""
        self._subscribers.append(listener)

    def load(self, path: Path) -> None:
        if not path.exists():
            return
        try:
            data = read_regular(path, FILE_LIMIT)  # a FIFO would block the start: refused (files.py)
        except FileTooBig as exc:
            raise KVConfigError(f"cannot read KV config {path}: {exc.strerror} (nor can Java's NameServer: "
                                "its KVConfigManager reads the file into one Java array)") from None
        except OSError as exc:
            raise KVConfigError(f"cannot read KV config {path}: {exc.strerror}") from None
        if not data.strip():
            return  # Java reads an empty file as an empty table
        data, self.not_utf8 = as_utf8(data)
        try:
            self.configTable = read_table(data)
            self.size = len(self.encode())
            self.bounded = self._measured(self.configTable)
        except ValueError as exc:
            raise KVConfigError(f"cannot load KV config {path}: {exc}") from None

    def _measured(self, table: Table) -> dict[str, int]:
        return {ns: len(fastjson.dumps_stored(table.get(ns, {}))) for ns in self._bounds}

    def encode(self, table: dict[str, dict[str, str]] | None = None) -> bytes:
        table = self.configTable if table is None else table
        by_namespace = {ns: java_hash_map(table[ns]) for ns in table}
        return fastjson.dumps_stored({"configTable": java_hash_map(by_namespace)})

    def _staged(self) -> tuple[Table, int, dict[str, int]]:
        """The table with every change accepted so far, its encoded size and its bounded namespaces'."""
        newest = self._next or self._writing
        if newest is not None:
            return newest.table, newest.size, newest.bounded
        return self.configTable, self.size, self.bounded

    def _accept(self, table: Table, size: int, namespace: str, key: str, saved: Saved | None,
                bounded: dict[str, int]) -> None:
        """Stage ``table`` (the staged one with one change, ``size`` bytes encoded, within the limit:
        ``put`` checked it) to be saved; ``saved`` None: raise the StoreError of a save that is
        done now."""
        outcome = _Outcome() if saved is None else None
        tell = outcome.saved if outcome is not None else saved
        assert tell is not None
        staged, _, _ = self._staged()
        if self._writing is None and self._next is None and table is staged:
            tell(None)  # nothing to write, nothing in flight: it is as saved
        else:
            batch = self._next = self._next or _Batch(table, size, bounded)
            batch.table, batch.size, batch.bounded = table, size, bounded
            batch.keys.append((namespace, key))
            batch.waiting.append(tell)
            if self._writing is None:
                self._write_next()
        if outcome is not None:
            outcome.check()

    def _write_next(self) -> None:
        if self._writing is not None:  # begun meanwhile (a caller told of the last one changed more)
            return
        batch, self._next = self._next, None
        if batch is None:
            return
        if batch.table == self.configTable:  # the changes undid each other, or changed nothing: none to hear
            self._done(batch, None, changed=False)
            return
        self._writing = batch
        # encoded where it is written (a thread): the whole table, up to maxKvBytes, for each write
        self._save(lambda: self.encode(batch.table), lambda error: self._written(batch, error))

    def _written(self, batch: _Batch, error: StoreError | None) -> None:
        """A write is over: adopt its table and tell its callers, or fail them and the changes
        staged on it; a file renamed in place but not durable is put back first."""
        self._writing = None
        if error is None:
            self.configTable, self.size, self.bounded = batch.table, batch.size, batch.bounded
            self.missing, self.unwritten = False, None
            self._done(batch, None)
            self._write_next()
            return
        failed, self._next = self._next, None
        if self.missing:  # the file was gone before this write: still gone
            self.unwritten = str(error)
        if error.replaced:  # renamed in place, not durable: the saved table goes back first
            saved_table = self.configTable
            self._writing = _Batch(saved_table, self.size, self.bounded)
            self._save(lambda: self.encode(saved_table), self._restored)
        # told last: a caller may change the table again at once (a pipelining peer's next put)
        self._done(batch, error, changed=False)
        if failed is not None:
            self._done(failed, error, changed=False)

    def _restored(self, error: StoreError | None) -> None:
        """The saved table's write (put back, or written again) is over: the file holds it, or not."""
        if error is None:
            self.missing, self.unwritten = False, None
        else:
            self.missing, self.unwritten = True, str(error)
        self._writing = None
        self._write_next()

    def _done(self, batch: _Batch, error: StoreError | None, changed: bool = True) -> None:
        if changed:
            for namespace, key in dict.fromkeys(batch.keys):
                for listener in self._subscribers:
                    listener(namespace, key)
        for saved in batch.waiting:
            saved(error)

    def file_lost(self) -> None:
        """The file is gone (its data directory removed while running): ``missing`` until written again
        (``write_again``, once the directory is the server's again)."""
        self.missing = True

    def write_again(self) -> None:
        """The file is gone (its data directory removed while running), or its last rewrite failed
        (``missing``): the table written again as saved, unless a write is in flight or staged
        (that one writes it; if it fails, the next call tries again).  Else a restart would start with
        no KV config at all, every value acknowledged before lost."""
        self.missing = True
        if self._writing is not None or self._next is not None:
            return
        table = self._writing = _Batch(self.configTable, self.size, self.bounded)
        self._save_again(lambda: self.encode(table.table), self._restored)

    def put(self, namespace: str, key: str, value: str | None, saved: Saved | None = None) -> None:
        """A null value is dropped, as fastjson drops null map values when persisting."""
        staged, staged_size, bounded = self._staged()
        entries = staged.get(namespace)
        if entries is not None and entries.get(key) == value:
            self._accept(staged, staged_size, namespace, key, saved, bounded)  # as staged already
            return
        size = staged_size + _size_change(staged, namespace, key, value)
        limit = self._limit()
        if limit and size > max(limit, staged_size):  # the one check: a removal grows it only by a new namespace
            raise KVLimitError(f"the KV table would be {size} bytes, over maxKvBytes ({limit})")
        bound = self._bounds.get(namespace)
        if bound is not None:  # one of its own too, by the same rule
            was = bounded[namespace]
            grown = was + _entries_change(entries or {}, key, value)
            if grown > max(bound, was):
                raise KVLimitError(f"{namespace} would be {grown} bytes, over the {bound} it may hold")
            bounded = {**bounded, namespace: grown}
        batch = self._next
        if batch is not None and namespace in batch.own:  # the batch's own copy: no one reads it yet
            table, changed = staged, entries
        else:  # a copy: the saved table, and the one being written, never change
            changed = dict(entries or {})
            table = {**staged, namespace: changed}
        assert changed is not None
        if value is None:
            changed.pop(key, None)
        else:
            changed[key] = value
        self._accept(table, size, namespace, key, saved, bounded)
        if self._next is not None and self._next.table is table:
            self._next.own.add(namespace)

    def get(self, namespace: str | None, key: str | None) -> str | None:
        return self.configTable.get(namespace, {}).get(key)  # type: ignore[arg-type]

    def delete(self, namespace: str | None, key: str | None, saved: Saved | None = None) -> None:
        staged, staged_size, bounded = self._staged()
        if namespace is None or key is None or key not in staged.get(namespace, {}):
            # nothing to delete (Java writes the file anyway): told once what is staged is saved
            self._accept(staged, staged_size, str(namespace), str(key), saved, bounded)
            return
        self.put(namespace, key, None, saved)

    def get_kv_list(self, namespace: str | None) -> dict[str, str] | None:
        return self.configTable.get(namespace)  # type: ignore[arg-type]

    def entries(self) -> int:
        """How many keys all namespaces hold: /api's overview and the namesrv_kv_entries gauge."""
        return sum(map(len, self.configTable.values()))
