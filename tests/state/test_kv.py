"""KVConfigManager: namespaced key/value pairs persisted as Java's kvConfig.json."""

from __future__ import annotations

import json

import pytest

from twisted_namesrv.state.kv import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigError, KVConfigManager
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
