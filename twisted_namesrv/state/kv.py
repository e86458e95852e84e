"""KVConfigManager: namespaced key/value pairs (e.g. ORDER_TOPIC_CONFIG), persisted after
every change as ``{"configTable":{namespace:{key:value}}}``, like Java's kvConfig.json.

A change is saved before it is made in memory: a save that fails (a full disk, no fd left, an
I/O error) raises StoreError and changes nothing, in memory or on disk.

What the table may hold is bounded (``maxKvBytes``, its encoded size): each change rewrites the
whole file in the reactor, and PUT_KV_CONFIG is any peer's without ACL.  A change that would grow
it past the bound raises KVLimitError and changes nothing; one that does not grow it is taken.

Each change is published to the subscribers as ``(namespace, key)``: an ORDER_TOPIC_CONFIG key
shows in its topic's route answers, which the answer cache drops."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from ..remoting import fastjson
from ..remoting.fastjson import java_hash_map
from .files import read_regular
from .store import StoreError

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigError(Exception):
    """The persisted KV file exists but cannot be read: refuse to start rather than empty it."""


class KVLimitError(Exception):
    """A change that would grow the table past ``maxKvBytes``: refused, nothing changed."""


class KVConfigManager:
    def __init__(self, persist: Callable[[bytes], None], limit: Callable[[], int] = lambda: 0) -> None:
        """``persist(data)`` saves the whole table, raising StoreError when it cannot; ``limit()``:
        the most bytes its encoding may grow to (0: no limit)."""
        self.configTable: dict[str, dict[str, str]] = {}
        self._persist = persist
        self._limit = limit
        #: the encoded size of configTable as it was last saved (or loaded)
        self.size = 0
        self._subscribers: list[Callable[[str, str], None]] = []

    def subscribe(self, listener: Callable[[str, str], None]) -> None:
        """``listener(namespace, key)`` hears every key put or deleted from now on."""
        self._subscribers.append(listener)

    def _changed(self, namespace: str, key: str) -> None:
        for listener in self._subscribers:
            listener(namespace, key)

    def load(self, path: Path) -> None:
        if not path.exists():
            return
        try:
            data = read_regular(path, None)  # a FIFO would block the start: refused (files.py)
        except OSError as exc:
            raise KVConfigError(f"cannot read KV config {path}: {exc.strerror}") from None
        if not data.strip():
            return  # Java reads an empty file as an empty table
        try:
            obj = fastjson.loads(data)
            table = obj.get("configTable") or {}
            self.configTable = {str(ns): {str(k): str(v) for k, v in kv.items() if v is not None}
                                for ns, kv in table.items()}
            self.size = len(self.encode())
        except (ValueError, AttributeError, TypeError) as exc:
            raise KVConfigError(f"cannot load KV config {path}: {exc}") from None

    def encode(self, table: dict[str, dict[str, str]] | None = None) -> bytes:
        table = self.configTable if table is None else table
        by_namespace = {ns: java_hash_map(table[ns]) for ns in table}
        return fastjson.dumps_bytes({"configTable": java_hash_map(by_namespace)})

    def _commit(self, table: dict[str, dict[str, str]]) -> None:
        """Durable first, then in memory: a save that fails changes nothing, nor does one that
        would grow the table past the limit (KVLimitError)."""
        data, limit = self.encode(table), self._limit()
        if limit and len(data) > max(limit, self.size):
            raise KVLimitError(f"the KV table would be {len(data)} bytes, over maxKvBytes ({limit})")
        try:
            self._persist(data)
        except StoreError as exc:
            if exc.replaced:  # renamed in place but not durable: put the old table back
                with suppress(StoreError):
                    self._persist(self.encode())
            raise
        self.configTable, self.size = table, len(data)

    def put(self, namespace: str, key: str, value: str | None) -> None:
        """A null value is dropped, as fastjson drops null map values when persisting."""
        limit = self._limit()
        if limit and value is not None and key not in self.configTable.get(namespace, {}):
            least = self.size + len(key) + len(value) + 6  # "key":"value", at the least: refused before encoding
            if least > max(limit, self.size):
                raise KVLimitError(f"the KV table would be at least {least} bytes, over maxKvBytes ({limit})")
        entries = dict(self.configTable.get(namespace, {}))
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
        self._commit({**self.configTable, namespace: entries})
        self._changed(namespace, key)

    def get(self, namespace: str | None, key: str | None) -> str | None:
        return self.configTable.get(namespace, {}).get(key)  # type: ignore[arg-type]

    def delete(self, namespace: str | None, key: str | None) -> None:
        entries = self.configTable.get(namespace)  # type: ignore[arg-type]
        if entries is not None and key in entries:
            self._commit({**self.configTable, namespace: {k: v for k, v in entries.items() if k != key}})  # type: ignore[dict-item]
            self._changed(namespace, key)  # type: ignore[arg-type]

    def get_kv_list(self, namespace: str | None) -> dict[str, str] | None:
        return self.configTable.get(namespace)  # type: ignore[arg-type]
