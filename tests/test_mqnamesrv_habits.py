"""Habits of Java's ``mqnamesrv`` (NamesrvStartup + ServerUtil): ``-n`` / ``--namesrvAddr`` and
``-h`` are accepted, every key that changes nothing here says so, in ``-p`` and at start, and a
file Java itself wrote (tests/data/java-config) starts us, ``--strict-config`` included."""

from __future__ import annotations

from pathlib import Path

import pytest

from twisted_namesrv import properties, tap
from twisted_namesrv.state.config import NO_EFFECT, ConfigError, NamesrvConfig


def options(tmp_path, *argv: str) -> tap.Options:
    parsed = tap.Options()
    parsed.parseOptions(["--data-dir", str(tmp_path), *argv])
    return parsed


def test_dash_n_takes_the_nameserver_list_as_mqnamesrv_does(tmp_path):
    parsed = options(tmp_path, "-n", "10.0.0.1:9876;10.0.0.2:9876")
    assert parsed.config["namesrvAddr"] == "10.0.0.1:9876;10.0.0.2:9876"
    assert options(tmp_path, "--namesrvAddr", "h:9876").config["namesrvAddr"] == "h:9876"
    with pytest.raises(ConfigError, match=r"namesrvAddr: 'nope' is not host:port"):
        NamesrvConfig({"namesrvAddr": "nope"})


def test_dash_h_prints_the_help(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        options(tmp_path, "-h")
    assert stopped.value.code in (0, None) and "--namesrvAddr" in capsys.readouterr().out


def test_dash_p_says_which_keys_have_no_effect_here_and_why(tmp_path):
    printed = NamesrvConfig().all_keys_text()
    for name in ("serverWorkerThreads", "clientRequestThreadPoolNums", "serverSelectorThreads",
                 "useEpollNativeSelector", "rocketmqHome"):
        assert f"# {name}: no effect here (" in printed, name
    assert "# listenPort: no effect" not in printed and "# orderMessageEnable: no effect" not in printed
    assert set(NO_EFFECT) <= set(properties.load(printed))  # each is still listed, with its value


def test_a_start_with_a_key_that_has_no_effect_warns_naming_it(tmp_path):
    path = tmp_path / "namesrv.properties"
    path.write_text("serverWorkerThreads=32\nserverSelectorThreads=3\nlistenPort=9876\n")
    config = NamesrvConfig.from_file(str(path), {"kvConfigPath": str(tmp_path / "kv.json")}, strict=True)
    assert config.warnings == [f"{path}: serverWorkerThreads=32: no effect here, ignored (one reactor thread serves "
                               "every connection and request: there is no pool to size)"]  # at its default: quiet


JAVA_WRITTEN = Path(__file__).parent / "data" / "java-config"


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_a_file_java_wrote_starts_us_under_strict_config(tmp_path, version, capsys):
    """Java's own -c file after an updateNamesrvConfig (every NamesrvConfig and NettyServerConfig key,
    rocketmqHome included: tests/data/java-config/README.md says how it was made) is accepted by
    --strict-config in either generation; the one key without effect here warns."""
    path = JAVA_WRITTEN / f"namesrv-{version}.properties"
    parsed = options(tmp_path, "-c", str(path), "--strict-config", "--compat", version,
                     "--kv-config-path", str(tmp_path / "kv.json"))
    assert parsed.config["orderMessageEnable"] is True  # what the update changed
    assert parsed.config["configStorePath"] == str(path)  # Java: -c sets it, whatever the file says
    assert capsys.readouterr().err == (f"namesrv: warning: {path}: rocketmqHome=/opt/rocketmq: no effect here, "
                                       "ignored (Java reads its logback configuration there; logging here is "
                                       "Twisted's (--log-*))\n")


def test_strict_config_still_refuses_a_key_no_nameserver_reads(tmp_path):
    path = tmp_path / "namesrv.properties"
    path.write_text((JAVA_WRITTEN / "namesrv-5.3.3.properties").read_text() + "orderMessageEnabled=true\n")
    with pytest.raises(SystemExit, match=f"^namesrv: cannot start: {path}: unknown key orderMessageEnabled "
                                         r"\(refused by --strict-config; did you mean orderMessageEnable\?\)"):
        options(tmp_path, "-c", str(path), "--strict-config", "--kv-config-path", str(tmp_path / "kv.json"))


def test_the_data_dir_s_file_java_wrote_keeps_what_this_server_does_not_read_back(tmp_path):
    """An in-place swap from mqnamesrv (no -c): Java 5.3.3 wrote ~/namesrv/namesrv.properties at an
    updateNamesrvConfig, with rocketmqHome and every key of its own. Ours, started on that directory,
    reads back the runtime keys only; its own updateNamesrvConfig rewrote the file without
    rocketmqHome (no value here without $ROCKETMQ_HOME) or any key it does not know, so Java started
    again with ``-c`` on it lost them. Now those are written back as they were; what it runs with
    (listenPort here) is its own, as Java writes its own."""
    store = tmp_path / "namesrv.properties"
    store.write_text("configStorePath=/root/namesrv/namesrv.properties\norderMessageEnable=true\n"
                     "productEnvName=center\nrocketmqHome=/opt/rocketmq\nlistenPort=9876\nsomeFutureKey=x\n")
    config = NamesrvConfig.from_file(None, {"configStorePath": str(store), "listenPort": 9877})
    config.apply({"productEnvName": "ours"})
    text = config.stored_text()
    assert "rocketmqHome=/opt/rocketmq\n" in text and "someFutureKey=x\n" in text
    assert "productEnvName=ours\n" in text and "orderMessageEnable=true\n" in text and "listenPort=9877\n" in text
    assert "someFutureKey" not in config.properties_text() and "rocketmqHome" not in config.properties_text()
    assert properties.load(text)["rocketmqHome"] == "/opt/rocketmq"


@pytest.mark.parametrize("java_wrote", ["bindAddress=0.0.0.0\n", ""])
def test_the_file_it_saves_binds_java_where_java_bound_after_a_swap_back(tmp_path, java_wrote):
    """Java 5.3.3's mqnamesrv -c reads bindAddress from the file (MixAll.properties2Object into
    NettyServerConfig; 4.9.8 has no such key), and its default is 0.0.0.0; ours is 127.0.0.1. An
    updateNamesrvConfig here wrote bindAddress=127.0.0.1, and Java started again on that file
    listened on loopback, out of every broker's and client's reach.  Now a bindAddress no one set is
    written as the file had it, or not at all (Java's default); one set is written as set."""
    store = tmp_path / "namesrv.properties"
    store.write_text("orderMessageEnable=true\nlistenPort=9876\n" + java_wrote)
    config = NamesrvConfig.from_file(None, {"configStorePath": str(store)})
    assert config["bindAddress"] == "127.0.0.1"  # what it listens on: a guarded key, never read back
    config.apply({"productEnvName": "ours"})
    assert properties.load(config.stored_text()).get("bindAddress") == (java_wrote and "0.0.0.0" or None)
    assert "bindAddress=127.0.0.1\n" in config.properties_text()  # what it answers says where it listens
    for chosen in ({"bindAddress": "127.0.0.1"}, {"bindAddress": "10.0.0.5"}):  # the command line's
        config = NamesrvConfig.from_file(None, {"configStorePath": str(store), **chosen})
        assert properties.load(config.stored_text())["bindAddress"] == chosen["bindAddress"]
    written = tmp_path / "written.properties"
    written.write_text("bindAddress=127.0.0.1\nlistenPort=9876\n")  # the -c file's
    config = NamesrvConfig.from_file(str(written))
    assert properties.load(config.stored_text())["bindAddress"] == "127.0.0.1"


def test_a_start_in_place_of_mqnamesrv_says_which_of_its_files_it_read(tmp_path):
    """Started on Java's ~/namesrv, nothing in the log said kvConfig.json or namesrv.properties was
    read (Java says "load KV config table OK"): now one line each, with what they held."""
    from twisted.logger import capturedLogs, formatEvent

    from twisted_namesrv.service import _say_what_was_read
    from twisted_namesrv.state.kv import KVConfigManager

    kv_path, store = tmp_path / "kvConfig.json", tmp_path / "namesrv.properties"
    kv_path.write_text('{"configTable":{"ORDER_TOPIC_CONFIG":{"TopicJ":"broker-a:8"},"NS_J":{"k":"v","k2":"v2"}}}')
    store.write_text("orderMessageEnable=true\nproductEnvName=center\nrocketmqHome=/opt/rocketmq\n")
    config = NamesrvConfig.from_file(None, {"configStorePath": str(store), "kvConfigPath": str(kv_path)})
    kv = KVConfigManager(lambda make, saved: None, lambda: 1 << 20)
    kv.load(kv_path)
    with capturedLogs() as events:
        _say_what_was_read(config, kv, kv_path)
    lines = [formatEvent(event) for event in events]
    assert lines == [f"load KV config table OK: {kv_path}, 2 namespaces, 3 keys",
                     f"{store}: 2 keys read (orderMessageEnable, productEnvName)"]
