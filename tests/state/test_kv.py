"""KVConfigManager: namespaced key/value pairs persisted as Java's kvConfig.json."""

from __future__ import annotations

import json

import pytest

from twisted_namesrv.state.kv import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigError, KVConfigManager, KVLimitError
from twisted_namesrv.state.store import write_atomically


def file_backed(path) -> KVConfigManager:
    kv = KVConfigManager(lambda data: write_atomically(path, data))
    kv.load(path)
    return kv


def test_put_get_delete_list():
    writes: list[bytes] = []
    kv = KVConfigManager(writes.append)
    assert kv.get("NS", "k") is None and kv.get_kv_list("NS") is None
    kv.put("NS", "k1", "v1")
    kv.put("NS", "k2", "v2")
    kv.put("NS", "k1", "v1b")
    kv.put(NAMESPACE_ORDER_TOPIC_CONFIG, "TopicA", "broker-a:4;broker-b:4")
    assert kv.get("NS", "k1") == "v1b"
    assert kv.get_kv_list("NS") == {"k1": "v1b", "k2": "v2"}
    assert kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, "TopicA") == "broker-a:4;broker-b:4"
    assert len(writes) == 4  # every put persists the whole table
    assert json.loads(writes[-1]) == {"configTable": {
        "NS": {"k1": "v1b", "k2": "v2"}, NAMESPACE_ORDER_TOPIC_CONFIG: {"TopicA": "broker-a:4;broker-b:4"}}}
    kv.delete("NS", "k1")
    assert kv.get("NS", "k1") is None and len(writes) == 5
    kv.delete("NS", "k2")
    assert kv.get_kv_list("NS") == {}  # an emptied namespace still exists (Java: {"table":{}})
    kv.delete("NS", "absent")
    kv.delete("NO-NS", "k")
    assert kv.get(None, None) is None and kv.get_kv_list(None) is None


def test_null_value_is_dropped():
    writes: list[bytes] = []
    kv = KVConfigManager(writes.append)
    kv.put("NS", "k", "v")
    kv.put("NS", "k", None)
    kv.put("NS", "other", None)
    assert kv.get("NS", "k") is None and kv.get("NS", "other") is None
    assert json.loads(writes[-1]) == {"configTable": {"NS": {}}}


def test_persists_and_reloads_after_a_restart(tmp_path):
    path = tmp_path / "sub" / "kvConfig.json"
    kv = file_backed(path)
    kv.put("NS", "k1", "v1")
    kv.put("NS", "k2", "värde/ü")
    kv.put(NAMESPACE_ORDER_TOPIC_CONFIG, "TopicA", "broker-a:8")
    kv.delete("NS", "k2")
    assert path.exists()
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temporary file left behind
    restarted = file_backed(path)
    assert restarted.configTable == {"NS": {"k1": "v1"}, NAMESPACE_ORDER_TOPIC_CONFIG: {"TopicA": "broker-a:8"}}


def test_loads_a_java_written_file_and_drops_null_values(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.write_text('{"configTable":{"ORDER_TOPIC_CONFIG":{"OrderTopic":"broker-a:2","gone":null}}}')
    kv = file_backed(path)
    assert kv.get_kv_list("ORDER_TOPIC_CONFIG") == {"OrderTopic": "broker-a:2"}


def test_missing_file_is_an_empty_table(tmp_path):
    kv = file_backed(tmp_path / "absent.json")
    assert kv.configTable == {}
    assert not (tmp_path / "absent.json").exists()


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"configTable": {"NS": "flat"}}', b"\xff\xfe"])
def test_corrupt_file_raises_naming_the_file(tmp_path, content):
    path = tmp_path / "kvConfig.json"
    path.write_bytes(content)
    with pytest.raises(KVConfigError) as info:
        file_backed(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content  # never overwritten


def test_a_change_that_would_grow_the_table_past_its_limit_changes_nothing(tmp_path):
    """Each put rewrote the whole file, in the reactor, without a bound: 600 unsigned puts of 60 KB
    values (no ACL) made a 36 MB file, the last puts taking 0.36 s each while nothing else was
    answered, and nothing stopped the disk filling. Past maxKvBytes a put that grows the table is
    refused; one that does not grow it (a smaller value, a delete) is taken, even over a lowered limit."""
    writes: list[bytes] = []
    limit = [200]
    kv = KVConfigManager(writes.append, lambda: limit[0])
    kv.put("NS", "k1", "v" * 100)
    with pytest.raises(KVLimitError, match=r"would be (at least )?\d+ bytes, over maxKvBytes \(200\)"):
        kv.put("NS", "k2", "v" * 100)
    assert kv.get_kv_list("NS") == {"k1": "v" * 100} and len(writes) == 1 and kv.size == len(writes[-1])
    encoded = []
    kv.encode = lambda table=None: encoded.append(table) or b"{}"  # type: ignore[method-assign]
    with pytest.raises(KVLimitError, match="at least"):  # a new key past it: refused before encoding the table
        kv.put("NS", "k9", "v" * 100)
    assert encoded == []
    del kv.encode
    limit[0] = 50  # lowered below what is held: what does not grow it still goes
    kv.put("NS", "k1", "short")
    kv.delete("NS", "k1")
    with pytest.raises(KVLimitError):
        kv.put("NS", "k3", "v" * 100)
    limit[0] = 0  # no limit
    kv.put("NS", "k3", "v" * 1000)
    assert len(writes) == 4 and kv.get("NS", "k3") == "v" * 1000


def test_a_loaded_table_over_the_limit_is_kept_and_shrinks(tmp_path):
    path = tmp_path / "kvConfig.json"
    file_backed(path).put("NS", "k", "v" * 500)
    kv = KVConfigManager(lambda data: write_atomically(path, data), lambda: 100)
    kv.load(path)
    assert kv.get("NS", "k") == "v" * 500 and kv.size == path.stat().st_size
    with pytest.raises(KVLimitError):
        kv.put("NS", "other", "x")
    kv.put("NS", "k", "v")
    assert json.loads(path.read_bytes()) == {"configTable": {"NS": {"k": "v"}}}
