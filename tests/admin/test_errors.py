"""Failures exit non-zero with a clear line on stderr; several NameServers like mqadmin's -n."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
import pytest_twisted
from twisted.internet import protocol, reactor

from tests.admin.support import namesrv, refused_addr, run_cli, silent_server
from tests.interop.broker_double import HOST
from tests.support import free_port
from twisted_namesrv import properties
from twisted_namesrv.admin.cli import SUBCOMMANDS
from twisted_namesrv.admin.client import AdminError, NamesrvClient, split_namesrv_list
from twisted_namesrv.remoting import RemotingCommand, RequestCode


@pytest_twisted.ensureDeferred
async def test_connection_refused():
    addr = refused_addr()
    run = await run_cli("-n", addr, "clusterList")
    assert (run.code, run.out) == (1, "")
    assert run.err == f"error: connect to {addr} failed: Connection refused\n"


@pytest_twisted.ensureDeferred
async def test_timeout():
    port = silent_server()
    try:
        addr = f"127.0.0.1:{port.getHost().port}"
        run = await run_cli("-n", addr, "--timeout", "0.3", "getKvConfig", "-s", "NS", "-k", "k")
    finally:
        await port.stopListening()
    assert (run.code, run.out) == (1, "")
    assert run.err == f"error: {addr}: no answer to GET_KV_CONFIG within 0.3 s\n"


@pytest_twisted.ensureDeferred
async def test_a_read_passing_over_a_silent_namesrv_says_so(tmp_path):
    """A firewall that drops packets (not one that refuses) makes the list's first NameServer a
    silent pause of --timeout: the answer came from the next, and nothing said the first was
    unreachable."""
    port, one = silent_server(), await namesrv(tmp_path, "one")
    try:
        silent = f"127.0.0.1:{port.getHost().port}"
        run = await run_cli("-n", f"{silent};{one.addr}", "--timeout", "0.3", "clusterList")
    finally:
        await port.stopListening()
        await one.stop()
    assert run.code == 0 and run.out.startswith("#Cluster Name")
    assert run.err == (f"warning: {silent}: no answer to GET_BROKER_CLUSTER_INFO within 0.3 s "
                       f"(answered by {one.addr})\n")


@pytest_twisted.ensureDeferred
async def test_a_write_left_unanswered_may_have_been_applied_and_says_so():
    """An answer dropped on its way back (a firewall on the return path, a NameServer stopping):
    the request was sent and was applied there, but "no answer" read as "not done"."""
    port = silent_server()
    try:
        addr = f"127.0.0.1:{port.getHost().port}"
        run = await run_cli("-n", addr, "--timeout", "0.3", "updateKvConfig", "-s", "NS", "-k", "k", "-v", "v")
    finally:
        await port.stopListening()
    assert (run.code, run.out) == (1, "")
    assert run.err == (f"error: {addr}: no answer to PUT_KV_CONFIG within 0.3 s: it was sent, so it may have "
                       "been applied; read it back before sending it again\n")


@pytest_twisted.ensureDeferred
async def test_usage_errors():
    assert (await run_cli("topicRoute")).code == 2  # -t missing
    assert (await run_cli("noSuchCommand")).code == 2
    run = await run_cli("-n", "localhost:x", "clusterList")
    assert (run.code, run.err) == (2, "error: bad NameServer address 'localhost:x' (expected host, host:port or "
                                      "[IPv6]:port)\n")
    run = await run_cli("-n", "10.0.0.1:9876,10.0.0.2:9876", "clusterList")  # a list with Kafka's separator
    assert (run.code, run.err) == (2, "error: bad NameServer address '10.0.0.1:9876,10.0.0.2:9876' (NameServers are "
                                      "separated by ';', as with mqadmin -n)\n")
    run = await run_cli("-n", "a:b:9876", "clusterList")  # not an IPv6 address: no brackets made up for it
    assert run.code == 2 and "expected host, host:port or [IPv6]:port" in run.err
    assert (await run_cli("--timeout", "0", "clusterList")).code == 2
    assert (await run_cli("compare", "127.0.0.1:1", "127.0.0.1:")).code == 2
    assert (await run_cli("--help")).code == 0


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
async def test_every_subcommand_exits_1_when_unreachable_and_2_on_usage(name):
    required = [arg for flag, dest, _, needed in SUBCOMMANDS[name][2] if needed for arg in (flag, "x")]
    dead = refused_addr()
    run = await run_cli("-n", dead, name, *required)
    assert (run.code, run.out) == (1, ""), run.err
    assert f"connect to {dead} failed: Connection refused" in run.err
    assert (await run_cli("-n", "host:0", name, *required)).code == 2
    if required:
        assert (await run_cli("-n", dead, name)).code == 2


def test_namesrv_list_parsing():
    assert split_namesrv_list(" 127.0.0.1:9876; 127.0.0.1:9877;") == ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert split_namesrv_list("localhost;10.0.0.1:9877;[::1];[::1]:9") == [
        "localhost:9876", "10.0.0.1:9877", "[::1]:9876", "[::1]:9"]
    assert NamesrvClient("[::1]:9").host == "::1"
    for bad in ("", ";", "host:", "host:0", "host:x", ":9876", "[]"):
        try:
            split_namesrv_list(bad)
        except AdminError:
            continue
        raise AssertionError(f"{bad!r} accepted")


class AnswersAtOnce(protocol.Protocol):
    """A peer that answers whatever it gets with ``reply`` (nginx answers a binary request 400)."""

    reply = b""

    def dataReceived(self, data: bytes) -> None:
        self.transport.write(self.reply)
        self.transport.loseConnection()


class SpeaksFirst(protocol.Protocol):
    """A peer that greets before it is asked, as an SSH server does."""

    def connectionMade(self) -> None:
        self.transport.write(b"SSH-2.0-OpenSSH_9.6\r\n")


def http_error(addr: str) -> str:
    return f"error: {addr} answered HTTP, not RocketMQ remoting (is that the status/metrics port?)\n"


@pytest_twisted.ensureDeferred
async def test_the_status_page_port_is_named_as_http(tmp_path):
    """Twisted's HTTP server waits for a line end a remoting frame never has: the silence makes
    the client ask on a second connection (well before a 30 s timeout)."""
    ns = await namesrv(tmp_path, metricsPort=free_port())
    try:
        web = await ns.service.web_ready
        addr = f"{HOST}:{web.getHost().port}"
        run = await run_cli("-n", addr, "--timeout", "30", "clusterList")
        assert (run.code, run.out, run.err) == (1, "", http_error(addr))
        run = await run_cli("--timeout", "30", "compare", ns.addr, addr)
        assert (run.code, run.out, run.err) == (1, "", http_error(addr))
        run = await run_cli("-n", f"{addr};{ns.addr}", "clusterList")  # a read moves on to the next
        assert run.code == 0, run.err
    finally:
        await ns.stop()


@pytest_twisted.ensureDeferred
async def test_peers_that_answer_something_else_are_named():
    factory = protocol.Factory.forProtocol(AnswersAtOnce)
    factory.protocol.reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
    http = reactor.listenTCP(0, factory, interface=HOST)
    ssh = reactor.listenTCP(0, protocol.Factory.forProtocol(SpeaksFirst), interface=HOST)
    try:
        addr = f"{HOST}:{http.getHost().port}"
        run = await run_cli("-n", addr, "topicList")
        assert (run.code, run.err) == (1, http_error(addr))
        addr = f"{HOST}:{ssh.getHost().port}"
        run = await run_cli("-n", addr, "topicList")
        assert run.code == 1
        assert run.err.startswith(f"error: {addr}: undecodable answer to GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ")
        assert run.err.endswith(" (is that a RocketMQ NameServer's port?)\n")
    finally:
        await http.stopListening()
        await ssh.stopListening()


def test_config_update_body_reads_back_exactly():
    for key, value in [("k", "plain"), ("a b=c:d", " lead\\ing #x!\ttab\nnl"), ("k", "Zürich ☃"), ("k", "x🎉")]:
        line = properties.dump_line(key, value, ascii_only=True)
        assert line.isascii()
        assert properties.load(line) == {key: value}


@pytest_twisted.ensureDeferred
async def test_reads_fall_over_to_the_next_namesrv_and_writes_go_to_each(tmp_path):
    one, two = await namesrv(tmp_path, "one"), await namesrv(tmp_path, "two")
    dead = refused_addr()
    try:
        both = f"{one.addr};{two.addr}"
        run = await run_cli("-n", both, "updateKvConfig", "-s", "NS", "-k", "k", "-v", "v")
        assert run.code == 0 and run.out.count(" OK") == 2
        for server in (one, two):
            assert (await run_cli("-n", server.addr, "getKvConfig", "-s", "NS", "-k", "k")).out == "v\n"
        run = await run_cli("-n", f"{dead};{two.addr}", "getKvConfig", "-s", "NS", "-k", "k")
        # the first of -n unreachable is said, though the next answered (before: nothing)
        assert (run.code, run.out) == (0, "v\n")
        assert run.err == f"warning: connect to {dead} failed: Connection refused (answered by {two.addr})\n"
        run = await run_cli("-n", f"{dead};{one.addr}", "wipeWritePerm", "-b", "broker-x")
        assert run.code == 1 and run.out == ""
        assert run.err == (f"error: connect to {dead} failed: Connection refused\n"
                           f"error: {one.addr}: no broker named broker-x is registered (clusterList lists them)\n")
        run = await run_cli("-n", f"{dead};{refused_addr()};{dead}", "getKvConfig", "-s", "NS", "-k", "k")
        assert run.code == 1 and run.err.count("Connection refused") == 2  # each address once
        run = await run_cli("-n", both, "getNamesrvConfig")
        assert run.code == 0 and run.out.count("============") == 4
    finally:
        await one.stop()
        await two.stop()


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize(("given", "missing"), [("NAMESRV_ACCESS_KEY", "NAMESRV_SECRET_KEY"),
                                                ("NAMESRV_SECRET_KEY", "NAMESRV_ACCESS_KEY")])
async def test_half_credentials_are_a_usage_error_not_unsigned_requests(monkeypatch, given, missing):
    """Only one of the two keys set: exit 2 naming both, before any request goes out unsigned."""
    monkeypatch.delenv(missing, raising=False)
    monkeypatch.setenv(given, "ops")
    dead = refused_addr()
    for argv in (("-n", dead, "updateKvConfig", "-s", "ns", "-k", "k", "-v", "v"), ("-n", dead, "clusterList"),
                 ("compare", dead, refused_addr()), ("getControllerMetaData", "-a", dead)):
        run = await run_cli(*argv)
        assert (run.code, run.out) == (2, ""), argv
        assert run.err == (f"error: {given} is set but {missing} is not: set both to sign requests (aclEnable), "
                           "or neither to send them unsigned\n"), argv


def _answer_once_per_connection(listener: socket.socket, connections: int) -> None:
    """Accept ``connections`` connections in turn; answer one request on each, then close it."""
    for _ in range(connections):
        conn, _ = listener.accept()
        with conn:
            (length,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
            request = RemotingCommand.decode(conn.recv(length, socket.MSG_WAITALL))
            conn.sendall(RemotingCommand.response_to(request).encode())
    listener.close()


@pytest.mark.parametrize("second_connection", [True, False])
def test_a_kept_connection_closed_meanwhile_is_made_again_and_never_blamed_on_tls(second_connection):
    """A NameServer restarted between two requests of one client (simulate-broker's heartbeats, an
    admin session) closed the kept connection: the next request failed with 'closed the connection
    before answering ... (is the NameServer enforcing TLS? try --tls)'. Now it is sent once more on
    a new connection; a server that is gone is named by that connection's refusal."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = threading.Thread(target=_answer_once_per_connection, args=(listener, 1 + second_connection),
                              daemon=True)
    server.start()
    client = NamesrvClient(f"127.0.0.1:{port}", timeout=5)
    try:
        assert client.call(RequestCode.GET_KV_CONFIG).code == 0  # answered; the server then closes the connection
        time.sleep(0.2)  # the close has arrived
        if second_connection:
            assert client.call(RequestCode.GET_KV_CONFIG).code == 0
        else:
            server.join(5)
            with pytest.raises(AdminError) as failed:
                client.call(RequestCode.GET_KV_CONFIG)
            assert str(failed.value) == f"connect to 127.0.0.1:{port} failed: Connection refused"
    finally:
        client.close()


@pytest_twisted.ensureDeferred
async def test_a_remark_s_lines_are_laid_out_indented_not_shown_as_escapes(tmp_path):
    """Java's TOPIC_NOT_EXIST remark (and ours, the same bytes) has a newline before its FAQ link:
    shown as a line of its own, indented, not as a literal backslash-n."""
    ns = await namesrv(tmp_path)
    try:
        run = await run_cli("-n", ns.addr, "topicRoute", "-t", "Nope")
    finally:
        await ns.stop()
    assert run.code == 1 and "\\n" not in run.err, run.err
    first, second = run.err.splitlines()
    assert first.startswith("error: ") and first.endswith("No topic route info in name server for the topic: Nope")
    assert second.startswith("  See ") and second.endswith("for further details."), second


@pytest.mark.parametrize("word", ["updateTopic", "brokerStatus", "updateOrderConf"])
def test_mqadmin_s_other_commands_are_told_where_they_belong(word):
    """An operator used to mqadmin types its broker commands: told namesrv-admin has NameServers'
    only (updateTopic: how a topic reaches the NameServers; updateOrderConf: this CLI's command for
    it), exit 2, before any connection is tried."""
    import io

    from twisted_namesrv.admin.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["-n", refused_addr(), "--timeout", "1", word, "-t", "T"], out, err)
    assert (code, out.getvalue()) == (2, "")
    text = err.getvalue()
    assert text.startswith(f"namesrv-admin: {word} is not one of its subcommands.") and "--help" in text
    assert ("updateKvConfig -s ORDER_TOPIC_CONFIG" in text) == (word == "updateOrderConf")
    assert ("register it with every NameServer" in text) == (word == "updateTopic")


@pytest.mark.parametrize("argv", [["--name", "{addr}", "--time", "1", "{word}"], ["--json", "-n={addr}", "{word}"],
                                  ["-n{addr}", "--timeout=1", "{word}"]])
def test_the_subcommand_is_found_after_options_as_argparse_reads_them(argv):
    """Options before the subcommand, as argparse takes them: abbreviated (``--name`` for --namesrv,
    ``--time`` for --timeout), with their value after '=' or joined, ``--json`` first. The word
    after an abbreviated option was taken for the subcommand: ``--name HOST clusterList`` said
    'HOST is not one of its subcommands'. A real subcommand is run (the NameServer refuses the
    connection: exit 1); an mqadmin command is told where it belongs (exit 2)."""
    import io

    from twisted_namesrv.admin.cli import main

    addr = refused_addr()
    for word, code in (("clusterList", 1), ("updateTopic", 2)):
        out, err = io.StringIO(), io.StringIO()
        assert main([a.format(addr=addr, word=word) for a in argv], out, err) == code, err.getvalue()
        assert ("is not one of its subcommands" in err.getvalue()) == (word == "updateTopic"), err.getvalue()
