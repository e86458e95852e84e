"""``$JAVA_OPT`` as an operator moving from ``mqnamesrv`` keeps it: this server reads none of it, and
says so, naming what does the same here for each system property Java's NameServer acts on."""

from __future__ import annotations

from twisted_namesrv import java_opt, tap
from twisted_namesrv.state.config import NamesrvConfig

AT_ROOTS_DEFAULT = NamesrvConfig({"kvConfigPath": "/root/namesrv/kvConfig.json"})


def test_each_property_java_acts_on_is_named_with_what_does_the_same_here():
    environ = {"JAVA_OPT": "-server -Xms4g -Xmx4g -Duser.home=/data/rocketmq -Dtls.server.mode=enforcing "
                           "-Dtls.server.keyPassword=s3cret -Dcom.rocketmq.remoting.frameMaxLength=33554432 "
                           "-Drmq.logdir=/data/logs"}
    said = java_opt.warnings(environ, AT_ROOTS_DEFAULT)
    assert said == [
        "$JAVA_OPT is set: options for Java's JVM, not read by this server (the command line and the -c file are read)",
        "$JAVA_OPT: -Duser.home=/data/rocketmq: Java keeps kvConfig.json and namesrv.properties in "
        "/data/rocketmq/namesrv; here: --data-dir /data/rocketmq/namesrv",
        "$JAVA_OPT: -Dtls.server.mode=enforcing: here: --tls-mode enforcing (or tls.server.mode=enforcing in the "
        "-c file)",
        "$JAVA_OPT: -Dtls.server.keyPassword=******: here: tls.server.keyPassword in the -c file",
        "$JAVA_OPT: -Dcom.rocketmq.remoting.frameMaxLength=33554432: here: frameMaxLength=33554432 in the -c file"]
    assert "s3cret" not in "".join(said)


def test_a_data_dir_that_already_is_user_home_s_needs_no_line_and_no_variable_no_word():
    """Nor does a kvConfigPath set by the -c file or the command line: Java reads the file's over
    user.home's too.  Nor heap and GC flags, which have no counterpart here: a host that sets
    JAVA_OPT for every JVM is not warned at every start."""
    environ = {"JAVA_OPTS": "'-Duser.home=/data/rocketmq/'"}
    assert java_opt.warnings(environ, NamesrvConfig({"kvConfigPath": "/data/rocketmq/namesrv/kvConfig.json"})) == []
    set_by_the_file = NamesrvConfig({"kvConfigPath": "/srv/kv.json"})
    set_by_the_file.sources["kvConfigPath"] = "/etc/namesrv.properties"
    assert java_opt.warnings(environ, set_by_the_file) == []
    assert java_opt.warnings({"JAVA_OPT": " ", "HOME": "/root"}, AT_ROOTS_DEFAULT) == []
    assert java_opt.warnings({"JAVA_OPT": "-server -Xms4g -Xmx4g -XX:+UseG1GC -Drmq.logdir=/data/logs"},
                             AT_ROOTS_DEFAULT) == []
    open_quote = {"JAVA_OPT": "-Dtls.server.mode='enforcing"}  # as the shell would not have taken it
    assert java_opt.warnings(open_quote, AT_ROOTS_DEFAULT)[1:] == [
        "$JAVA_OPT: -Dtls.server.mode='enforcing: here: --tls-mode 'enforcing (or tls.server.mode='enforcing in "
        "the -c file)"]


def test_the_launcher_warns_on_stderr(tmp_path, monkeypatch, capsys):
    """Before, ``JAVA_OPT=-Duser.home=/data/rocketmq`` was taken in silence: the server started on an
    empty ``~/namesrv``, the KV store (ORDER_TOPIC_CONFIG) seemingly gone (the line naming
    ``--data-dir``: test_each_property_java_acts_on_is_named_with_what_does_the_same_here)."""
    monkeypatch.setenv("JAVA_OPT", "-Duser.home=/data/rocketmq")
    monkeypatch.delenv("JAVA_OPTS", raising=False)
    tap.Options().parseOptions(["--kv-config-path", str(tmp_path / "kv.json")])
    assert capsys.readouterr().err.splitlines() == []  # kvConfigPath given: Java's would not be in user.home either
    monkeypatch.setenv("HOME", str(tmp_path))
    tap.Options().parseOptions([])
    assert capsys.readouterr().err.splitlines() == [
        "namesrv: warning: $JAVA_OPT is set: options for Java's JVM, not read by this server (the command line and "
        "the -c file are read)",
        "namesrv: warning: $JAVA_OPT: -Duser.home=/data/rocketmq: Java keeps kvConfig.json and namesrv.properties in "
        "/data/rocketmq/namesrv; here: --data-dir /data/rocketmq/namesrv"]
