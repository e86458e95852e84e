"""A port another process holds: the start's line names it (pid and command line), read from /proc.
"Address already in use" alone, as Java's BindException, sent someone to ss -ltnp at 3 a.m."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from twisted_namesrv import port_holders

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def fake_proc(tmp_path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """A /proc of /net/tcp rows (local address, state, inode)."""
    (tmp_path / "net").mkdir(parents=True)
    lines = [f"   {n}: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000  1000        0 {inode} 1"
             for n, (local, state, inode) in enumerate(rows)]
    (tmp_path / "net" / "tcp").write_text(HEADER + "\n".join(lines) + "\n")
    return tmp_path


def process(proc: Path, pid: int, argv: list[bytes], sockets: list[str]) -> None:
    (proc / str(pid) / "fd").mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(argv) + b"\0")
    for fd, inode in enumerate(sockets):
        os.symlink(f"socket:[{inode}]", proc / str(pid) / "fd" / str(fd))


def test_the_listening_process_is_named_with_its_command_line_on_one_line(tmp_path):
    proc = fake_proc(tmp_path, [("0100007F:2694", "0A", "777"),  # 127.0.0.1:9876, listening
                                ("0100007F:2694", "01", "778")])  # a connection to it: not the holder
    process(proc, 12, [b"sshd"], ["778"])
    process(proc, 4242, [b"java", b"-cp", b"x", b"org.apache.rocketmq.namesrv.NamesrvStartup\n"], ["5", "777"])
    assert port_holders.held_by(9876, proc) == (
        "; held by pid 4242 (java -cp x org.apache.rocketmq.namesrv.NamesrvStartup\\n)")
    assert port_holders.held_by(9877, proc) == ""  # nothing listens there: nothing added


def test_a_holder_this_user_cannot_see_is_said_with_the_command_that_tells(tmp_path):
    proc = fake_proc(tmp_path, [("00000000:2694", "0A", "777")])
    process(proc, 12, [b"other"], [])
    assert port_holders.held_by(9876, proc) == (
        "; held by a process this user cannot see (as root: ss -ltnp 'sport = :9876')")


def test_a_real_listening_socket_is_found_in_this_process():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        found, listening = port_holders.holders(port)
    assert listening and [pid for pid, _ in found] == [os.getpid()]
