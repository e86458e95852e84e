"""The server side of an accepted TCP connection: Twisted's ``tcp.Server`` without the two strings
it makes for every connection as it accepts it.

``tcp.Server.__init__`` formats its log prefix (``logstr``: "RemotingProtocol,12345,127.0.0.1",
which ``logPrefix`` gives Twisted's legacy log as the ``system`` of a line logged while it serves
the socket) and its repr (``repstr``: "<RemotingProtocol #12345 on 9876>"), about 160 bytes a
connection held for its life: 0.9 MB at the scale curve's 6,000 connections, none of it read
unless a line is logged in the socket's context (an error, a write the kernel did not take at
once, a disconnection) or something prints the transport. Here both are made when asked, from the
same fields; ``Listener`` (server.py) has its port accept into this class, and the reactor
(reactor.py) reads it as it reads Twisted's own ``tcp.Server``.

The peer's host is interned as the connection is made: each accept gives its address a string of
its own ("127.0.0.1", 58 bytes), which the transport keeps (``client``, ``hostname``) for the
connection's life, so thousands of connections from one host (the brokers of a machine, a
client fleet behind one proxy) held as many copies; interned, they share one, the one the
protocol keeps too (``RemotingProtocol.host``). The address is kept as its parts, the host and
the port (``client``, which ``getPeer`` reads, is made of them when read), not as the tuple the
accept made, 64 bytes a connection more.

After the connection is gone (``connectionLost`` deletes its ``protocol``) the prefix says ``-``
where the protocol's name was, and the repr ``?``; the repr names the port it listens on now
(None once it stopped listening), where Twisted's named the port it accepted on.

``LeanPort`` is the listening port that accepts into ``LeanServer`` (``Listener`` makes it on a
POSIX reactor), each accept without two kinds of work no NameServer reads: the standard library's
``socket.accept`` converts the listening socket's family and type to their enums for the accepted
socket (two look-ups through ``enum``, about 25 lines of Python an accept), and Twisted builds the
peer's ``IPv4Address`` through attrs' validators twice, for ``buildProtocol`` and again for
``getPeer`` (about 15 more).  Here the accepted socket is made of the listening socket's numbers,
and an IPv4 address of its three fields (``tcp_address``); the objects are the same.  At the
scale curve's 5,000 brokers an accept was 177 lines of Python, 91 k instructions: 16% of what
``tools/bench/instructions.py`` counts a first registration, where a broker's connection is
accepted (the curve connects its brokers before it times the phase).
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from twisted.internet import tcp
from twisted.internet.address import IPv4Address, IPv6Address

#: the listening socket's own numbers, read in C (``socket.socket``'s properties convert them to enums)
_FAMILY, _TYPE, _PROTO = (_raw.__get__ for _raw in (socket.SocketType.family, socket.SocketType.type,
                                                   socket.SocketType.proto))


#: whether this Twisted's IPv4Address keeps its fields in a ``__dict__`` (attrs without slots), as
#: ``tcp_address`` sets them; else it is made by its own constructor
_DICT_BACKED = hasattr(IPv4Address("TCP", "127.0.0.1", 0), "__dict__")


def tcp_address(host: str, port: int) -> IPv4Address:
    """``IPv4Address("TCP", host, port)`` without attrs' validator of its first field, a constant
    here (every accept made two, one for ``buildProtocol`` and one for ``getPeer``)."""
    if not _DICT_BACKED:
        return IPv4Address("TCP", host, port)
    address = object.__new__(IPv4Address)
    address.__dict__.update(type="TCP", host=host, port=port)
    return address


class _Listening(socket.socket):
    """A listening socket whose ``accept`` makes the accepted socket of its own numbers, as
    ``socket.socket.accept`` does but for their enums (the socket holds the same ints)."""

    __slots__ = ()

    def accept(self) -> tuple[socket.socket, Any]:
        fd, address = self._accept()  # type: ignore[attr-defined]
        made = socket.socket(_FAMILY(self), _TYPE(self), _PROTO(self), fd)
        if socket.getdefaulttimeout() is None and self.gettimeout():  # (as the standard library's)
            made.setblocking(True)
        return made, address


class LeanServer(tcp.Server):
    """``tcp.Server`` whose ``logstr`` and ``repstr`` are made when read; Twisted's ``__init__``
    sets them, and the setters keep nothing; its peer's host is the interned string."""

    def __init__(self, sock: Any, protocol: Any, client: tuple[Any, ...], server: Any, sessionno: int,
                 reactor: Any) -> None:
        """``tcp.Server.__init__`` but its two strings (it formats both, each through a call or two,
        for the setters below to drop: four Python calls an accept)."""
        host = client[0]
        if type(host) is str:
            client = (sys.intern(host), *client[1:])
        tcp.Connection.__init__(self, sock, protocol, reactor)
        if len(client) != 2:
            self._addressType = IPv6Address
        self.server = server
        self.client = client
        self.sessionno = sessionno
        self.hostname = client[0]
        self.startReading()
        self.connected = 1

    def getPeer(self) -> Any:
        """Twisted's, an IPv4 peer's made by ``tcp_address``."""
        if self._rest:
            return super().getPeer()
        return tcp_address(self.hostname, self._port)  # type: ignore[arg-type]  # (Twisted types it object)

    @property
    def client(self) -> tuple[Any, ...]:
        """The peer's address as the accept gave it, which ``getPeer`` reads: its (interned) host,
        its port and, IPv6's, its flow info and scope id."""
        return (self.hostname, self._port, *self._rest)

    @client.setter
    def client(self, value: tuple[Any, ...]) -> None:
        self._port, self._rest = value[1], value[2:]  # (an IPv4 peer's rest: the one empty tuple)

    @property  # type: ignore[override]
    def logstr(self) -> str:
        protocol = getattr(self, "protocol", None)
        prefix = "-" if protocol is None else self._getLogPrefix(protocol)
        return f"{prefix},{self.sessionno},{self.hostname}"

    @logstr.setter
    def logstr(self, value: str) -> None:
        pass

    @property
    def repstr(self) -> str:
        protocol = getattr(self, "protocol", None)
        name = "?" if protocol is None else protocol.__class__.__name__
        port = getattr(self.server, "_realPortNumber", None)
        return f"<{name} #{self.sessionno} on {port}>"

    @repstr.setter
    def repstr(self, value: str) -> None:
        pass


class LeanPort(tcp.Port):
    """Twisted's listening TCP port, accepting into ``LeanServer`` through ``_Listening``, an IPv4
    peer's address for ``buildProtocol`` made by ``tcp_address`` (the module docstring)."""

    transport = LeanServer

    def createInternetSocket(self) -> socket.socket:
        made = super().createInternetSocket()  # (Twisted's options set on it: non-blocking, SO_REUSEADDR)
        listening = _Listening(_FAMILY(made), _TYPE(made), _PROTO(made), made.detach())
        listening.setblocking(False)
        return listening

    def _buildAddr(self, address: tuple[Any, ...]) -> Any:
        if len(address) == 2 and self._addressType is IPv4Address:
            return tcp_address(*address)
        return super()._buildAddr(address)


#: the transports whose read is Twisted's ``tcp.Connection.doRead`` as it is (reactor.py serves
#: their reads itself)
PLAIN_READS = (tcp.Server, LeanServer)
