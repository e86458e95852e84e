"""``$JAVA_OPT`` as an operator moving from ``mqnamesrv`` keeps it: this server reads none of it, and
says so, naming what does the same here for each system property Java's NameServer acts on."""

from __future__ import annotations

from twisted_namesrv import java_opt, tap


def test_each_property_java_acts_on_is_named_with_what_does_the_same_here():
    environ = {"JAVA_OPT": "-server -Xms4g -Xmx4g -Duser.home=/data/rocketmq -Dtls.server.mode=enforcing "
                           "-Dtls.server.keyPassword=s3cret -Dcom.rocketmq.remoting.frameMaxLength=33554432 "
                           "-Drmq.logdir=/data/logs"}
    said = java_opt.warnings(environ, {"kvConfigPath": "/root/namesrv/kvConfig.json"})
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
    environ = {"JAVA_OPTS": "'-Duser.home=/data/rocketmq/'"}
    assert java_opt.warnings(environ, {"kvConfigPath": "/data/rocketmq/namesrv/kvConfig.json"}) == [
        "$JAVA_OPTS is set: options for Java's JVM, not read by this server (the command line and the -c file are "
        "read)"]
    assert java_opt.warnings({"JAVA_OPT": " ", "HOME": "/root"}, {}) == []
    assert java_opt.warnings({"JAVA_OPT": "-Dtls.server.mode='enforcing"}, {})[1:] == [  # a quote left open
        "$JAVA_OPT: -Dtls.server.mode='enforcing: here: --tls-mode 'enforcing (or tls.server.mode='enforcing in "
        "the -c file)"]


def test_the_launcher_warns_on_stderr(tmp_path, monkeypatch, capsys):
    """Before, ``JAVA_OPT=-Duser.home=/data/rocketmq`` was taken in silence: the server started on an
    empty ``~/namesrv``, the KV store (ORDER_TOPIC_CONFIG) seemingly gone."""
    monkeypatch.setenv("JAVA_OPT", "-Duser.home=/data/rocketmq")
    monkeypatch.delenv("JAVA_OPTS", raising=False)
    tap.Options().parseOptions(["--data-dir", str(tmp_path)])
    assert capsys.readouterr().err.splitlines()[1] == (
        "namesrv: warning: $JAVA_OPT: -Duser.home=/data/rocketmq: Java keeps kvConfig.json and namesrv.properties "
        "in /data/rocketmq/namesrv; here: --data-dir /data/rocketmq/namesrv")
