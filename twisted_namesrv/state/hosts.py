"""Which ``Host`` headers name this server: the HTTP side's defence against DNS rebinding.

A web page at ``attacker.example`` whose name the attacker re-points at this server's address (or at
127.0.0.1, from the operator's own browser) makes the browser connect here and send
``Host: attacker.example``; the browser's same-origin rule then lets that page read the answers.
Checking the peer's address cannot tell this apart from the operator (the connection comes from the
operator's browser), but the Host header can: a browser always sends the name it resolved, and a
rebinding attack only works through a name the attacker controls.  So every request, on every bind,
must name this server (``AllowedHosts.allows``):

- a loopback name or address (``localhost``, ``127.0.0.0/8``, ``::1``), on any bind: no one but this
  machine can make a browser send them, and ``kubectl port-forward``, ``podman exec`` and the
  image's health check do;
- the address the connection itself reached (the kubelet's probes and a Prometheus pod scrape send
  ``POD_IP:PORT``), and the listener's bind address;
- the names and addresses the operator configured for this server: ``advertisedAddress``, the hosts
  of ``nsaddrList`` and ``namesrvAddr``, this machine's hostname, and ``httpAllowedHosts`` (names,
  ``*.suffix`` for every name under a domain, addresses and CIDR networks for NAT and port maps).

A port and one trailing dot (``localhost.``, the DNS root) are ignored; case is ignored.  Anything
else -- ``127.0.0.1.attacker.example``, ``localhost.attacker.example``, ``127.1``, ``0x7f.0.0.1``, an
address no rule names, a header with a user part, spaces or a bad port -- is refused.  The loopback
trust of a server without ACL (the status page and ``/api`` for this machine's peers) also needs a
loopback Host (``is_loopback_host``): the hostname, though allowed, is no proof the page is local.

Pure: no Twisted, no I/O (the hostname is given).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: the names every bind answers to: no one but this machine can make a browser send them
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
#: binds that listen on every interface: no address of their own to allow
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


@dataclass(frozen=True, slots=True)
class Host:
    """A Host header read: a name (lower case, no trailing dot) or an address, and its port."""

    name: str
    address: Address | None
    port: int | None


def host_port(host: str, port: int | str) -> str:
    """``host:port`` as an address list, a URL and a log line write it: an IPv6 address in brackets
    (``[::1]:9876``), else ``::1:9876`` reads as the address ``::1:9876`` with no port."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def written_as_list(address: str) -> bool:
    """Whether one ``host:port`` of a NameServer list holds a comma or a space: a list written with
    another separator than RocketMQ's ``;`` (taken as one address, it names no server)."""
    return "," in address or any(c.isspace() for c in address)


def peer_group(host: str) -> str:
    """The key every per-host rule counts a peer under (the refusal log's one warning per host, a
    push's per address host, the searches per client): an IPv4 address as itself, an IPv4-mapped
    IPv6 address as its IPv4, any other IPv6 address as its /64 (``2001:db8::/64``), a name (or
    ``?``) as written.  One IPv6 host holds a whole /64 (SLAAC, privacy addresses): keyed by the
    address, a peer rotating through its /64 was 2^64 hosts, a warning line per connection."""
    address = _address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
    if address is None:
        return host
    if address.version == 6:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def peer_host(peer: str) -> str:
    """The host of ``host:port`` / ``[v6]:port`` / ``v6:port`` (a host without a port as it is).
    Every refusal's peer is written with its port, an IPv6 host often bare (Twisted's address
    joined with ``:``): its last ``:`` is the port's.  Taken whole, ``2001:db8::1:55497`` was a host
    of its own for every connection, a warning line each."""
    if peer.startswith("["):
        return peer[1:].partition("]")[0]
    return peer.rpartition(":")[0] if ":" in peer else peer


def remote_group(peer: str) -> str | None:
    """The ``peer_group`` of a peer written ``host:port`` (as every refusal and connection writes
    it), None for a loopback peer (this machine's own: the operator's tools, a co-located broker,
    a benchmark, no stranger to bound) and for one of no address (``?``: none known)."""
    address = _address(peer_host(peer))
    if address is None or address.is_loopback:
        return None
    return peer_group(str(address))


#: peers' and brokers' hosts KeptHosts keeps, each table started over when full
HOSTS_KEPT = 4096


class KeptHosts:
    """The host each peer and each broker address counts under, worked out once and kept: an IPv6
    address parsed is tens of Python calls, on a first registration's path.  One table for the
    server (``service.build`` makes it and hands it to the page's events and the remembered
    topology): two copies of one value computed in two places could come to disagree, and a peer
    counted under one host by one owner and another by the other would slip the bound of both.

    Kept by the address without its port (a connection's port is new at each connection, its host
    the same; a bare IPv6 address's last group, taken as a port, never leaves its /64).  The owners
    read ``peers``/``written`` with ``dict.get`` first (no Python call when kept) and call ``peer``
    or ``broker`` only for an address not kept yet."""

    __slots__ = ("peers", "written")

    def __init__(self) -> None:
        #: a connection's address (without its port) -> its ``remote_group`` (None: loopback, or none known)
        self.peers: dict[str, str | None] = {}
        #: a broker's address as it wrote it (without its port) -> its ``peer_group``
        self.written: dict[str, str] = {}

    def peer(self, peer: str) -> str | None:
        """The host a connection's peer (``host:port``) counts under: its ``remote_group``; None for a
        loopback peer (this machine's own tools and brokers) and for one of no address."""
        key = peer.rpartition(":")[0] or peer
        host = self.peers.get(key, _UNSEEN)
        if host is _UNSEEN:
            if len(self.peers) >= HOSTS_KEPT:
                self.peers.clear()
            host = self.peers[key] = remote_group(peer)
        return host  # type: ignore[return-value]

    def broker(self, address: str) -> str:
        """The host a broker's address as it wrote it counts under (``peer_group`` of its host):
        loopback too, since a remote peer may write 127.0.0.1."""
        key = address.rpartition(":")[0] or address
        host = self.written.get(key)
        if host is None:
            if len(self.written) >= HOSTS_KEPT:
                self.written.clear()
            host = self.written[key] = peer_group(peer_host(address))
        return host


#: an address not kept yet (None is a kept answer: a loopback peer)
_UNSEEN: object = object()


def _address(text: str) -> Address | None:
    """An IP address as written in a Host (``[v6]`` without brackets here), IPv4-mapped IPv6 as IPv4;
    None for a name.  Python's parser refuses ``127.1``, ``0x7f.0.0.1`` and leading zeros: those are
    names here, and no rule names them."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def parse_host(header: str) -> Host | None:
    """``name``, ``name:port``, ``[v6]``, ``[v6]:port`` (RFC 9110's Host), or None when it is none
    of these (a user part, spaces or control characters, an empty name, a bad port)."""
    text = header.strip().lower()
    if not text or any(c in text for c in "@/\\?#%") or any(ord(c) <= 32 or ord(c) >= 127 for c in text):
        return None
    if text.startswith("["):  # an IP-literal: IPv6 only (RFC 3986)
        inside, bracket, rest = text[1:].partition("]")
        address = _address(inside) if ":" in inside else None
        if not bracket or address is None or (rest and not rest.startswith(":")):
            return None
        return _with_port(inside, address, rest[1:] if rest else None)
    if text.count(":") > 1:  # an IPv6 address without brackets (not RFC 9110, but said plainly)
        address = _address(text)
        return Host(text, address, None) if address is not None else None
    name, colon, port_text = text.partition(":")
    return _with_port(name, _address(name), port_text if colon else None)


def _with_port(name: str, address: Address | None, port_text: str | None) -> Host | None:
    if port_text is not None and not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        return None
    if address is None and name.endswith("."):
        name = name[:-1]  # the DNS root: localhost. is localhost, 127.0.0.1. is 127.0.0.1
        address = _address(name)
    if address is None and (not name or name.startswith(".") or ".." in name or name.endswith(".")):
        return None
    return Host(name, address, int(port_text) if port_text is not None else None)


def is_loopback_host(host: Host) -> bool:
    return host.name in LOOPBACK_NAMES or (host.address is not None and host.address.is_loopback)


def _hosts_of_list(text: str) -> list[str]:
    """The hosts of ``host:port;host:port`` (nsaddrList, namesrvAddr)."""
    hosts = []
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        host = parse_host(entry)
        if host is not None:
            hosts.append(host.name)
    return hosts


class AllowedHostsError(ValueError):
    """An ``httpAllowedHosts`` entry that is no name, ``*.domain``, address or network."""


def parse_allowed(text: str) -> tuple[frozenset[str], tuple[str, ...], tuple[Network, ...]]:
    """``httpAllowedHosts``: entries separated by ``,`` -- names, ``*.domain`` (every name under it),
    addresses and CIDR networks; a bad entry raises AllowedHostsError naming it."""
    names: set[str] = set()
    suffixes: list[str] = []
    networks: list[Network] = []
    for entry in filter(None, (part.strip().lower() for part in text.split(","))):
        try:
            if "/" in entry or _address(entry.strip("[]")) is not None:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
        except ValueError:
            raise AllowedHostsError(f"{entry!r} is not an address or CIDR network") from None
        wildcard = entry.startswith("*.")
        host = parse_host(entry[2:] if wildcard else entry)
        if host is None or host.port is not None or host.address is not None or "*" in host.name:
            raise AllowedHostsError(f"{entry!r} is not a host name, *.domain, address or CIDR network")
        if wildcard:
            suffixes.append("." + host.name)
        else:
            names.add(host.name)
    return frozenset(names), tuple(suffixes), tuple(networks)


@dataclass(frozen=True)
class AllowedHosts:
    """What a Host header may name, worked out once from the configuration (``from_config``)."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[Network, ...] = ()

    @classmethod
    def from_values(cls, bind: str, advertised: str = "", lists: Iterable[str] = (), hostname: str = "",
                    allowed: str = "") -> AllowedHosts:
        """``bind``: metricsBindAddress; ``advertised``: advertisedAddress; ``lists``: nsaddrList and
        namesrvAddr; ``hostname``: this machine's; ``allowed``: httpAllowedHosts."""
        names, suffixes, networks = parse_allowed(allowed)
        configured = [bind] if bind.strip() not in WILDCARDS else []
        configured += [advertised] if advertised.strip() else []
        configured += [hostname] if hostname.strip() else []
        extra: set[str] = set()
        for text in configured:
            host = parse_host(text)
            if host is not None:
                extra.add(host.name)
        for text in lists:
            extra.update(_hosts_of_list(text))
        for name in extra:
            address = _address(name)
            if address is not None:
                networks += (ipaddress.ip_network(address),)
            else:
                names |= {name}
        return cls(frozenset(names), suffixes, networks)

    def allows(self, host: Host, local: str | None = None) -> bool:
        """Whether ``host`` names this server; ``local``: the address the connection reached."""
        if is_loopback_host(host):
            return True
        if host.address is not None:
            return (local is not None and _address(local.split("%")[0]) == host.address) or \
                any(host.address in network for network in self.networks)
        return host.name in self.names or any(host.name.endswith(suffix) for suffix in self.suffixes)
