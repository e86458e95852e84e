"""NamesrvConfig (its properties text: tests/test_properties_codec.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from twisted_namesrv import compat, properties
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.state.config import KEYS, ConfigError, NamesrvConfig, nearest_key


def make(tmp_path, **values) -> NamesrvConfig:
    base = {"kvConfigPath": str(tmp_path / "kv.json"), "configStorePath": str(tmp_path / "ns.properties")}
    base.update(values)
    return NamesrvConfig(base)


def listed(config: NamesrvConfig) -> dict[str, str]:
    return dict(line.split("=", 1) for line in config.properties_text().splitlines())


def test_defaults_are_javas():
    config = NamesrvConfig()
    assert config.profile is compat.JAVA_5_3_3
    assert config["listenPort"] == 9876
    assert config["serverChannelMaxIdleTimeSeconds"] == 120
    assert config["scanNotActiveBrokerInterval"] == 5000
    assert config["waitSecondsForService"] == 45
    assert config["enableTopicList"] is True and config["orderMessageEnable"] is False
    assert config["configBlackList"] == "configBlackList;configStorePath;kvConfigPath"


def test_config_file_keys_are_typed_and_listed(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("listenPort = 9988\norderMessageEnable=TRUE\nwaitSecondsForService: 7\n"
                    "customKey=custom value\nenableTopicList=false\ncompatVersion=4.9.8\n")
    config = NamesrvConfig.from_file(str(path))
    assert config.profile is compat.JAVA_4_9_8
    assert config["listenPort"] == 9988
    assert config["orderMessageEnable"] is True  # Boolean.parseBoolean is case-insensitive
    assert config["waitSecondsForService"] == 7
    assert config["configStorePath"] == str(path)  # -c sets configStorePath, as in Java
    keys = listed(config)
    assert keys["customKey"] == "custom value"
    assert keys["listenPort"] == "9988"
    # 5.x keys appear in 4.9.8 mode only because the file sets them
    assert keys["enableTopicList"] == "false" and keys["waitSecondsForService"] == "7"
    assert "returnOrderTopicConfigToBroker" not in keys and "needWaitForService" not in keys


def test_a_file_warns_of_keys_no_setting_has_and_strict_refuses_them(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("listenPort=9988\nbrokerClusterName=c1\n")
    config = NamesrvConfig.from_file(str(path))
    assert config.warnings == [f"{path}: unknown key brokerClusterName, ignored (a typo? --strict-config refuses "
                               "unknown keys)"]
    assert NamesrvConfig.from_file(None).warnings == []
    with pytest.raises(ConfigError, match=f"^{path}: unknown key brokerClusterName"):
        NamesrvConfig.from_file(str(path), strict=True)


def test_an_unknown_key_close_to_a_known_one_names_it(tmp_path):
    """Java's keys are case-sensitive and it ignores unknown ones in silence: ``listenport=9877`` or
    ``orderMessageEnabled=true`` in a file that ran Java left the setting at its default.  The
    warning (and --strict-config's refusal) names the key most likely meant."""
    path = tmp_path / "namesrv.conf"
    path.write_text("listenPrt=9989\nlistenport=9990\norderMessageEnabled=true\nbindAddr=0.0.0.0\n"
                    "metricPort=9877\nnamesrvAddress=h:9876\n")
    config = NamesrvConfig.from_file(str(path))
    assert config.warnings == [f"{path}: unknown key {name}, ignored (did you mean {meant}? --strict-config refuses "
                               "unknown keys)"
                               for name, meant in (("listenPrt", "listenPort"), ("listenport", "listenPort"),
                                                   ("orderMessageEnabled", "orderMessageEnable"),
                                                   ("bindAddr", "bindAddress"), ("metricPort", "metricsPort"),
                                                   ("namesrvAddress", "namesrvAddr"))]
    with pytest.raises(ConfigError, match=rf"^{path}: unknown key listenPrt \(refused by --strict-config; "
                                          r"did you mean listenPort\?\)$"):
        NamesrvConfig.from_file(str(path), strict=True)
    assert nearest_key("x" * 100 + "listenPort") is None  # a garbage line's key: no search through it


@pytest.mark.parametrize(("line", "name", "shown", "ours", "java"), [
    ("listenPort=9877 ", "listenPort", "9877 ", "9877",
     "Java's mqnamesrv ignores it and keeps 9876 (Integer.parseInt does not trim)"),
    ("orderMessageEnable=true\t", "orderMessageEnable", "true\\t", "true",
     "Java's mqnamesrv reads false (Boolean.parseBoolean does not trim)"),
    ("serverChannelMaxIdleTimeSeconds : 60  ", "serverChannelMaxIdleTimeSeconds", "60  ", "60",
     "Java's mqnamesrv ignores it and keeps 120 (Integer.parseInt does not trim)"),
    ("listenPort=9877\u2028", "listenPort", "9877\\u2028", "9877",  # a line separator: white space to Python's int()
     "Java's mqnamesrv ignores it and keeps 9876 (Integer.parseInt does not trim)"),
])
def test_a_number_or_boolean_ending_in_white_space_says_what_java_reads(tmp_path, line, name, shown, ours, java):
    """Properties.load keeps a value's trailing blanks and Java trims only strings: ``listenPort=9877 ``
    left Java on 9876, ``orderMessageEnable=true `` made it false, in silence.  Taken trimmed here,
    with a warning saying what Java did, so that a swap that changes behaviour says so."""
    path = tmp_path / "namesrv.conf"
    path.write_text(line + "\r\n")
    config = NamesrvConfig.from_file(str(path))
    assert str(config[name]).lower() == ours
    assert config.warnings == [f"{path}: {name}='{shown}' has white space around the value: taken as {ours} here, "
                               f"while {java}; remove the white space for both to read {ours}"]


@pytest.mark.parametrize("line", ["listenPort=9876 ", "orderMessageEnable=false ", "orderMessageEnable=true",
                                  "maxConnections=5 ", "productEnvName=center "])
def test_white_space_that_changes_nothing_java_reads_is_not_a_warning(tmp_path, line):
    """At the default, false either way, a key Java does not have, a string (trimmed by both)."""
    path = tmp_path / "namesrv.conf"
    path.write_text(line + "\n")
    assert NamesrvConfig.from_file(str(path)).warnings == []


def test_a_file_that_is_not_utf8_is_read_as_java_reads_it(tmp_path):
    """A file an older editor saved in ISO-8859-1 (``café`` as ``caf\\xe9``, in a comment or a value)
    started Java, which reads every -c file as ISO-8859-1; it stopped this server's start
    (``not UTF-8``).  Read as Java reads it, with a warning naming the first such byte's line."""
    path = tmp_path / "namesrv.conf"
    path.write_bytes(b"\xef\xbb\xbf# r\xe9glages\r\nlistenPort=9988\r\nproductEnvName=caf\xe9\r\n")
    config = NamesrvConfig.from_file(str(path))
    assert (config["listenPort"], config["productEnvName"]) == (9988, "café")
    assert config.warnings[0] == (f"{path}: byte 0xE9 on line 1 is not UTF-8: read as ISO-8859-1, as Java's "
                                  "mqnamesrv reads every -c file (an update saved to it writes UTF-8)")
    path.write_bytes("productEnvName=café\n".encode())  # UTF-8: read as such, no warning
    assert (NamesrvConfig.from_file(str(path))["productEnvName"], NamesrvConfig.from_file(str(path)).warnings[:1]) \
        == ("café", [f"{path}: productEnvName=café: not implemented, ignored (this NameServer does not do what "
                     "the key asks)"])


def test_a_key_set_twice_warns_naming_the_value_used_a_secret_masked(tmp_path):
    """Java keeps the last and says nothing: a line appended at the bottom silently beat the one
    an operator reads at the top."""
    path = tmp_path / "namesrv.conf"
    path.write_text("listenPort=9876\r\norderMessageEnable=true\r\nlistenPort=9877 \r\n"
                    "tls.server.keyPassword=a\ntls.server.keyPassword=b\n")
    config = NamesrvConfig.from_file(str(path))
    assert config["listenPort"] == 9877 and config["orderMessageEnable"] is True
    assert config.warnings == [
        f"{path}: listenPort set 2 times, the last used: listenPort=9877 (as Java's Properties.load; "
        "the earlier lines are ignored)",
        f"{path}: tls.server.keyPassword set 2 times, the last used: tls.server.keyPassword=****** "
        "(as Java's Properties.load; the earlier lines are ignored)",
        f"{path}: listenPort='9877 ' has white space around the value: taken as 9877 here, while Java's mqnamesrv "
        "ignores it and keeps 9876 (Integer.parseInt does not trim); remove the white space for both to read 9877"]


def test_a_byte_order_mark_is_read_past_saying_what_java_lost_to_it(tmp_path):
    """Java reads the mark into the first key (``\ufefflistenPort``) and so runs on 9876 in silence;
    here the file means what it says, and the warning says that Java did not do it."""
    path = tmp_path / "namesrv.conf"
    path.write_bytes(b"\xef\xbb\xbflistenPort=9988\r\n")
    config = NamesrvConfig.from_file(str(path))
    assert (config["listenPort"], config.warnings) == (9988, [
        f"{path}: starts with a byte-order mark (a Windows editor's): read past here, while Java's mqnamesrv reads "
        "it as part of the first key and so ignores listenPort=9988"])
    for harmless in (b"# settings\r\nlistenPort=9988\r\n", b"listenPort=9988\r\nlistenPort=9988\r\n"):
        path.write_bytes(b"\xef\xbb\xbf" + harmless)  # a comment first, or the key set again: Java lost nothing
        config = NamesrvConfig.from_file(str(path))
        assert config["listenPort"] == 9988 and not [w for w in config.warnings if "byte-order" in w]


@pytest.mark.parametrize("text", ["maybe", "yes", "1", ""])
def test_a_file_boolean_must_say_true_or_false_but_the_wire_reads_it_as_java(tmp_path, text):
    path = tmp_path / "namesrv.conf"
    path.write_text(f"orderMessageEnable={text}\n")
    with pytest.raises(ConfigError, match=f"^{path}: orderMessageEnable={text}: not a boolean"):
        NamesrvConfig.from_file(str(path))
    config = make(tmp_path, orderMessageEnable=True)
    config.apply({"orderMessageEnable": text})  # UPDATE_NAMESRV_CONFIG: Boolean.parseBoolean
    assert config["orderMessageEnable"] is False


def test_overrides_beat_the_file(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("listenPort=9988\n")
    config = NamesrvConfig.from_file(str(path), {"listenPort": 1234, "configStorePath": str(tmp_path / "x")})
    assert config["listenPort"] == 1234
    assert config["configStorePath"] == str(tmp_path / "x")


@pytest.mark.parametrize("line,key", [("listenPort=abc", "listenPort"),
                                      ("serverChannelMaxIdleTimeSeconds=1.5", "serverChannelMaxIdleTimeSeconds"),
                                      ("listenPort=70000", "listenPort"),
                                      ("frameMaxLength=10", "frameMaxLength"),
                                      ("serverChannelMaxIdleTimeSeconds=-1", "serverChannelMaxIdleTimeSeconds")])
def test_invalid_values_name_the_key(tmp_path, line, key):
    path = tmp_path / "namesrv.conf"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError, match=key):
        NamesrvConfig.from_file(str(path))


def test_unreadable_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.conf"):
        NamesrvConfig.from_file(str(tmp_path / "nope.conf"))


@pytest.mark.parametrize("version", ["4.9.7", "5", ""])
def test_unknown_compat_version_is_an_error(tmp_path, version):
    with pytest.raises(ValueError, match="compatVersion"):
        make(tmp_path, compatVersion=version)
    path = tmp_path / "namesrv.conf"
    path.write_text(f"compatVersion={version}\n")
    with pytest.raises(ValueError, match="compatVersion"):
        NamesrvConfig.from_file(str(path))


def test_both_profiles_by_name(tmp_path):
    assert make(tmp_path, compatVersion="4.9.8").profile is compat.JAVA_4_9_8
    assert make(tmp_path, compatVersion="5.3.3").profile is compat.JAVA_5_3_3


def test_listed_keys_follow_the_generation(tmp_path):
    v4, v5 = make(tmp_path, compatVersion="4.9.8"), make(tmp_path)
    v4_keys, v5_keys = listed(v4), listed(v5)
    assert "enableTopicList" not in v4_keys and "bindAddress" not in v4_keys
    assert v5_keys["enableTopicList"] == "true" and v5_keys["bindAddress"] == "127.0.0.1"
    assert "compatVersion" not in v5_keys and "frameMaxLength" not in v5_keys  # our own keys: only when set
    assert list(v5_keys) == sorted(v5_keys)  # 5.3.3 sorts GET_NAMESRV_CONFIG
    for key in ("kvConfigPath", "configStorePath", "listenPort", "orderMessageEnable", "configBlackList"):
        assert key in v4_keys and key in v5_keys


def test_blocked_keys_include_the_blacklist_and_guarded_keys(tmp_path):
    config = make(tmp_path, configBlackList="orderMessageEnable;;")
    blocked = config.blocked_keys()
    assert {"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome", "orderMessageEnable",
            "listenPort", "serverChannelMaxIdleTimeSeconds", "compatVersion"} <= blocked
    assert "" not in blocked
    assert "enableTopicList" not in blocked and "productEnvName" not in blocked


def test_all_keys_text_lists_every_key_unset_ones_empty(tmp_path):
    config = make(tmp_path, rocketmqHome=None)
    lines = dict(line.split("=", 1) for line in config.all_keys_text().splitlines() if not line.startswith("#"))
    assert list(lines) == [k.name for k in KEYS] and lines["rocketmqHome"] == ""
    assert lines["listenPort"] == "9876" and lines["compatVersion"] == "5.3.3"


# -- secrets and keys not implemented here (one set each, in the schema) --------------------------

def test_secret_values_are_left_out_of_the_answer_masked_in_p_and_kept_in_the_stored_file(tmp_path):
    from twisted_namesrv.state.config import MASK, masked

    path = tmp_path / "ns.properties"
    path.write_text("tls.server.keyPassword=pw1\ndb.password=pw2\nproductEnvName=center\n")
    config = NamesrvConfig.from_file(str(path), {"kvConfigPath": str(tmp_path / "kv.json")})
    assert "pw1" not in config.properties_text() and "pw2" not in config.properties_text()
    assert "productEnvName=center" in config.properties_text()
    stored = properties.load(config.stored_text())
    assert stored["tls.server.keyPassword"] == "pw1" and stored["db.password"] == "pw2"
    shown = properties.load(config.all_keys_text())
    assert shown["tls.server.keyPassword"] == MASK and shown["tls.server.mode"] == "disabled"
    assert properties.load(make(tmp_path).all_keys_text())["tls.server.keyPassword"] == ""  # unset: nothing to hide
    assert masked({"a.token": "x", "listenPort": "1", "secretKey": ""}) == {"a.token": MASK, "listenPort": "1",
                                                                            "secretKey": ""}


@pytest.mark.parametrize(("key", "why"), [
    ("clusterTest=true", "not implemented, ignored (this NameServer does not do what the key asks)"),
    ("clientRequestThreadPoolNums=32", "not implemented, ignored (this NameServer does not do what the key asks)"),
    ("rocketmqHome=/opt/rmq", "no effect here, ignored (Java reads its logback configuration there; logging here "
                              "is Twisted's (--log-*))"),
    ("connectTimeoutMillis=5000", "no effect here, ignored (a setting of Java's NameServer's Netty client (its "
                                  "NOTIFY_MIN_BROKER_ID_CHANGE and controller notices to brokers); this server sends "
                                  "each notice on a connection of its own, 3 s to connect)"),
    ("jRaftGroupId=g1", "no effect here, ignored (a key of Java's jRaft controller, which this server does not run "
                        "(controllerType jRaft is refused))"),
])
def test_java_keys_not_implemented_here_warn_even_when_strict(tmp_path, key, why):
    """mqnamesrv -c reads every one of these: --strict-config refuses only keys no NameServer reads."""
    path = tmp_path / "ns.properties"
    path.write_text(f"{key}\n")
    for strict in (False, True):
        config = NamesrvConfig.from_file(str(path), {"kvConfigPath": str(tmp_path / "kv.json")}, strict=strict,
                                         schema=SERVER_SCHEMA)  # as the launchers read it: the controller's too
        assert config.warnings == [f"{path}: {key}: {why}"]


def test_a_not_implemented_key_at_its_default_is_no_warning(tmp_path):
    path = tmp_path / "ns.properties"
    path.write_text("clusterTest=false\nenableControllerInNamesrv=false\norderMessageEnable=true\n")
    config = NamesrvConfig.from_file(str(path), {"kvConfigPath": str(tmp_path / "kv.json")}, strict=True)
    assert config.warnings == []


def test_the_http_side_binds_loopback_whatever_bind_address_says(tmp_path):
    config = make(tmp_path, bindAddress="0.0.0.0")
    assert config["metricsBindAddress"] == "127.0.0.1"
    with pytest.raises(ConfigError, match="metricsPort: 9877 is the listenPort"):
        make(tmp_path, metricsPort=9877, listenPort=9877)
    with pytest.raises(ConfigError, match="metricsBindAddress: empty"):
        make(tmp_path, metricsBindAddress=" ")


def test_the_schema_is_passed_in_and_grows_with_no_import() -> None:
    """controller/config.py used to add its keys to this module's tables when imported, so what
    ``-p``, ``--strict-config`` and ``is_secret`` said depended on what had been imported.  In a fresh
    interpreter: importing the whole controller changes no table here, and the NameServer's own
    schema and the server's (schema.py) say the same before and after."""
    probe = (
        "from twisted_namesrv.state import config as c\n"
        "before = ([k.name for k in c.KEYS], len(c.NAMESRV_SCHEMA.keys), c.is_secret('controllerEtcdToken'))\n"
        "import twisted_namesrv.controller.service, twisted_namesrv.controller.tap, twisted_namesrv.service\n"
        "from twisted_namesrv.schema import SERVER_SCHEMA\n"
        "after = ([k.name for k in c.KEYS], len(c.NAMESRV_SCHEMA.keys), c.is_secret('controllerEtcdToken'))\n"
        "assert before == after, (before, after)\n"
        "assert 'controllerType' not in c.KEYS_BY_NAME and 'controllerType' in SERVER_SCHEMA.by_name\n"
        "ns = c.NamesrvConfig({}, {'controllerType': 'etcd'})\n"
        "assert ns.extra == {'controllerType': 'etcd'}  # unknown to the NameServer's own schema\n"
        "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "ok", result.stderr


def test_the_servers_schema_types_checks_and_guards_the_controllers_keys() -> None:
    from twisted_namesrv.schema import SERVER_SCHEMA

    with pytest.raises(ConfigError, match="controllerType"):
        NamesrvConfig({"controllerType": "jRaft"}, schema=SERVER_SCHEMA)
    config = NamesrvConfig({}, {"controllerEtcdLeaseTtlSeconds": "5"}, schema=SERVER_SCHEMA)
    assert config["controllerEtcdLeaseTtlSeconds"] == 5
    assert {"controllerType", "controllerStorePath"} <= config.blocked_keys()
    assert "controllerStorePath" not in NamesrvConfig().blocked_keys()  # the NameServer alone does not know it
