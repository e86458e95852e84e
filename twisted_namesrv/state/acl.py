"""Optional ACL: requests signed as RocketMQ's clients sign them (ACL 1.0), checked against the
accounts of a ``plain_acl.yml``.

A client adds ``AccessKey`` (and optionally ``SecurityToken``; the C++ client also
``OnsChannel``) to the extFields, then ``Signature`` = Base64(HmacSHA1(secretKey, the values of
all other extFields in key order, then the body)).  Java checks this in brokers only; the
NameServer never did, so anyone could wipe a broker's write permission or rewrite the KV store.
Here every state-changing code needs a valid signature; operator codes need an ``admin``
account; reads need one only with ``aclReadRequired``.  A refusal is what a Java broker answers:
SYSTEM_ERROR with the AclException text.

The policy is by request class (``request_class``):

- ``broker`` (REGISTER_BROKER, UNREGISTER_BROKER, BROKER_HEARTBEAT, QUERY_DATA_VERSION): from a
  peer in ``aclBrokerNetworks`` (CIDR) or on a whitelist, or signed by any account -- so stock
  brokers, which sign nothing, register from the networks the operator names and nowhere else;
- ``admin`` (KV writes, write permissions, topics, config): always signed, by an ``admin: true``
  account; no network or whitelist stands in for the signature (unlike Java's ACL 1.0, whose
  global whitelist opens everything);
- ``read``: open, or with ``aclReadRequired`` as ``broker`` minus the broker networks.

Address whitelists (``globalWhiteRemoteAddresses``, an account's ``whiteRemoteAddress``) follow
ACL 1.0 (PlainPermissionManager.validate, RemoteAddressStrategyFactory) for the broker and read
classes: a peer on the global list needs no signature; a request naming an account whose
whitelist holds the peer needs none either.  Patterns:
``*``, one address, ``a,b,c``, ``192.168.1.{1,2}``, ranges ``192.168.1.1-10`` / ``192.168.*`` /
``192.168.1-10.*``, the IPv6 forms of those, and (beyond ACL 1.0) CIDR ``10.0.0.0/8``.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import hmac
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .files import TEXT_FILE_LIMIT, read_regular, read_regular_text

ACCESS_KEY, SIGNATURE, SECURITY_TOKEN = "AccessKey", "Signature", "SecurityToken"
#: this project's signature beside Java's (``bound_signature``): an extField no Java client sends
NAMESRV_SIGNATURE = "NamesrvSignature"
#: its scheme, the first part of its value, and what its content starts with
BOUND_SCHEME = "1"
BOUND_PREFIX = b"twisted-namesrv NamesrvSignature 1\n"
#: how far a NamesrvSignature's time may be from the server's, either way (aclSignatureWindowSeconds)
DEFAULT_WINDOW_SECONDS = 300
#: the nonces of accepted NamesrvSignatures remembered at most (NonceCache; about 200 bytes each)
NONCE_LIMIT = 16_384
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
#: what brokers send for themselves: any account that signs correctly
BROKER_CODES = frozenset({103, 104, 322, 904})
#: what operators send (KV, permissions, topics, config, and our RETIRE_BROKER_GROUP): admin accounts only
ADMIN_CODES = frozenset({100, 102, 205, 216, 217, 318, 327, 90001})
BROKER, ADMIN, READ = "broker", "admin", "read"
#: how often the accounts file is checked for changes (Java 4.9.8's AclFileWatchService: 5000 ms)
RELOAD_INTERVAL_SECONDS = 5.0


#: the controller's (RocketMQ 5.x controller mode, its own port): what brokers send for themselves --
#: heartbeat, alter sync-state set, register, next/apply broker id, and an election a broker asks for
CONTROLLER_BROKER_CODES = frozenset({904, 1001, 1002, 1003, 1012, 1013})
#: ... and what operators send: update the controller's config (unclean election), clean a group's data
CONTROLLER_ADMIN_CODES = frozenset({1009, 1011})
CONTROLLER_ELECT_MASTER = 1002


#: every controller request code (its own port): their class is controller_request_class's
CONTROLLER_CODES = frozenset(range(1001, 1014))


def request_class(code: int) -> str:
    return BROKER if code in BROKER_CODES else ADMIN if code in ADMIN_CODES else READ


def needs_signature(code: int, ext: Mapping[str, str | None], read_required: bool = False) -> bool:
    """Whether a client should sign a request, as the server it goes to classes it (a controller
    code by ``controller_request_class``): brokers' and operators' requests always, reads only when
    the server wants them signed (``read_required``).  A signature sent that nothing needs only gives
    a listener something to replay (ACL 1.0 covers neither the code nor the fields' names)."""
    kind = controller_request_class(code, ext) if code in CONTROLLER_CODES else request_class(code)
    return kind != READ or read_required


def controller_request_class(code: int, ext: Mapping[str, str | None]) -> str:
    """A controller request's class: an election that designates its master (mqadmin electMaster,
    ``designateElect=true``) is an operator's, one a broker asks for is a broker's."""
    if code in CONTROLLER_ADMIN_CODES or (code == CONTROLLER_ELECT_MASTER and
                                          (ext.get("designateElect") or "").lower() == "true"):
        return ADMIN
    return BROKER if code in CONTROLLER_BROKER_CODES else READ


class AclConfigError(ValueError):
    """An accounts file that cannot be used; the message names the file."""


Address = ipaddress.IPv4Address | ipaddress.IPv6Address
#: whether a peer's address is on a whitelist
AddressMatch = Callable[[Address], bool]


def _never(address: Address) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)  # a repr in a log or traceback must not carry it
    admin: bool = False
    #: whiteRemoteAddress: peers whose requests for this account need no signature
    white: AddressMatch = field(default=_never, repr=False, compare=False)


def peer_ip(remote: str) -> Address | None:
    """The IP of a peer's ``host:port`` (``[v6]:port``, or ``v6:port`` as the server writes it),
    an IPv4 peer of a dual-stack listener (``::ffff:a.b.c.d``) as IPv4; None when it is none."""
    host = remote
    if remote.startswith("["):
        host = remote[1:].partition("]")[0]
    elif ":" in remote:
        host = remote.rpartition(":")[0]
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def address_pattern(pattern: str) -> AddressMatch:
    """RemoteAddressStrategyFactory: a whitelist entry as a test of a peer's address; a malformed
    one raises ValueError naming it (Java: AclException at load)."""
    text = pattern.strip()
    if not text:
        return _never  # BlankRemoteAddressStrategy
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda address: True
    if "/" in text:
        network = ipaddress.ip_network(text, strict=False)
        return lambda address: address in network
    if text.endswith("}"):
        head, brace, tail = text.rpartition("{")
        if not brace or head[-1:] not in (".", ":"):
            raise ValueError(f"{pattern!r}: expected a.b.c.{{x,y}}")
        return _one_of([head + part.strip() for part in tail[:-1].split(",")])
    if "," in text:
        return _one_of([part.strip() for part in text.split(",") if part.strip()])
    if "*" in text or "-" in text:
        return _range(text)
    return _one_of([text])


def _one_of(texts: list[str]) -> AddressMatch:
    addresses = {ipaddress.ip_address(text) for text in texts}  # ValueError names a bad one
    return lambda address: address in addresses


def _range(text: str) -> AddressMatch:
    """RangeRemoteAddressStrategy: the parts before the first ``*`` or ``a-b`` part equal, that part in
    range, the parts after it anything (``192.168.*``, ``192.168.1.1-10``, ``2001:db8::1-ff``)."""
    v6 = ":" in text
    separator, base, width, top = (":", 16, 8, 0xFFFF) if v6 else (".", 10, 4, 255)
    parts = [part.strip() for part in text.split(separator)]
    index = next((i for i, part in enumerate(parts) if part == "*" or "-" in part), None)
    if index is None or index == 0:
        raise ValueError(f"{text!r}: a range needs fixed leading parts")
    try:
        low, high = (0, top) if parts[index] == "*" else (int(n, base) for n in parts[index].split("-", 1))
        head = _v6_words(parts[:index], width - len(parts) + index) if v6 else [int(p, base) for p in parts[:index]]
    except ValueError:
        raise ValueError(f"{text!r}: not an address range") from None
    index = len(head)
    if not (0 <= low <= high <= top and 0 < index < width and all(0 <= n <= top for n in head)):
        raise ValueError(f"{text!r}: out of range")

    def match(address: Address) -> bool:
        if (address.version == 6) != v6:
            return False
        packed = address.packed
        words = [int.from_bytes(packed[i:i + 2], "big") for i in range(0, 16, 2)] if v6 else list(packed)
        return words[:index] == head and low <= words[index] <= high

    return match


def _v6_words(groups: list[str], count: int) -> list[int]:
    """IPv6 groups before a range part, ``::`` filled with zeros up to ``count`` groups."""
    if "" in groups:
        gap = groups.index("")
        rest = [g for g in groups[gap:] if g]
        groups = groups[:gap] + ["0"] * (count - gap - len(rest)) + rest
    return [int(group, 16) for group in groups]


def _whitelist(entries: Any, where: str) -> AddressMatch:
    """A YAML list (or one string) of patterns as one test; a bad pattern raises AclConfigError."""
    if entries is None:
        return _never
    texts = [entries] if isinstance(entries, str) else entries
    if not isinstance(texts, list):
        raise AclConfigError(f"{where}: expected a list of addresses")
    try:
        tests = [address_pattern(str(text)) for text in texts if text is not None]
    except ValueError as exc:
        raise AclConfigError(f"{where}: bad address pattern: {exc}") from None
    return lambda address: any(test(address) for test in tests)


def signature(secret_key: str, ext: Mapping[str, str | None], body: bytes | memoryview | None) -> str:
    """AclUtils.calSignature(combineRequestContent(...)): values in Java String order of keys (a
    null value appends "null", as StringBuilder does).  A lone surrogate (a JSON header's ``\\ud800``)
    becomes ``?``, as Java's String.getBytes(UTF_8) writes it: signed like Java, never an exception."""
    fields = sorted((k for k in ext if k != SIGNATURE), key=lambda k: k.encode("utf-16-be", "surrogatepass"))
    content = "".join("null" if ext[k] is None else str(ext[k]) for k in fields).encode("utf-8", "replace")
    digest = hmac.new(secret_key.encode("utf-8", "replace"), content + bytes(body or b""), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def signed(ext: dict[str, str], access_key: str, secret_key: str, body: bytes | None = None,
           security_token: str | None = None) -> dict[str, str]:
    """``ext`` as AclClientRPCHook sends it: with AccessKey (SecurityToken) and Signature."""
    fields = {**ext, ACCESS_KEY: access_key, **({SECURITY_TOKEN: security_token} if security_token else {})}
    return {**fields, SIGNATURE: signature(secret_key, fields, body)}


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _length_prefixed(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def bound_content(code: int, stamp_ms: int, nonce: bytes, ext: Mapping[str, str | None],
                  body: bytes | memoryview | None) -> bytes:
    """What a NamesrvSignature signs: the scheme, the request code, its time and nonce, every
    extField but Signature and NamesrvSignature by name and value (each length-prefixed, a null value
    marked apart from an empty one, in key order), and the body.  So unlike ACL 1.0's content it
    cannot be moved to another code, or its fields re-cut or renamed, and it is fresh once.  Text is
    UTF-8 with lone surrogates (a JSON header's ``\\ud800``) kept as their bytes: never an exception."""
    fields = sorted((k for k in ext if k not in (SIGNATURE, NAMESRV_SIGNATURE)), key=lambda k: _utf8(k))
    parts = [BOUND_PREFIX, code.to_bytes(4, "big", signed=True), stamp_ms.to_bytes(8, "big"),
             _length_prefixed(nonce), len(fields).to_bytes(4, "big")]
    for name in fields:
        value = ext[name]
        parts.append(_length_prefixed(_utf8(name)))
        parts.append(b"\x00" if value is None else b"\x01" + _length_prefixed(_utf8(str(value))))
    parts.append(_length_prefixed(bytes(body or b"")))
    return b"".join(parts)


def bound_signature(secret_key: str, code: int, ext: Mapping[str, str | None], body: bytes | memoryview | None,
                    stamp_ms: int, nonce: bytes) -> str:
    """A NamesrvSignature's value: ``1:<unix ms>:<nonce hex>:<Base64 HmacSHA256 of bound_content>``."""
    mac = hmac.new(_utf8(secret_key), bound_content(code, stamp_ms, nonce, ext, body), hashlib.sha256)
    return f"{BOUND_SCHEME}:{stamp_ms}:{nonce.hex()}:{base64.b64encode(mac.digest()).decode()}"


def signed_bound(ext: dict[str, str], code: int, access_key: str, secret_key: str, body: bytes | None,
                 stamp_ms: int, nonce: bytes) -> dict[str, str]:
    """``ext`` as namesrv-admin sends it: AccessKey, NamesrvSignature, then Java's Signature over all
    of them (so a Java-only server checks it as any request; ours checks both)."""
    fields = {**ext, ACCESS_KEY: access_key}
    fields[NAMESRV_SIGNATURE] = bound_signature(secret_key, code, fields, body, stamp_ms, nonce)
    return {**fields, SIGNATURE: signature(secret_key, fields, body)}


def parse_bound(value: str) -> tuple[int, bytes, bytes] | None:
    """(time in ms, nonce, MAC) of a NamesrvSignature, or None when it is not one of scheme 1."""
    parts = value.split(":")
    if len(parts) != 4 or parts[0] != BOUND_SCHEME or not (parts[1].isascii() and parts[1].isdigit()):
        return None
    try:
        nonce, mac = bytes.fromhex(parts[2]), base64.b64decode(parts[3], validate=True)
    except ValueError:
        return None
    if not 8 <= len(nonce) <= 64 or len(parts[1]) > 15:
        return None
    return int(parts[1]), nonce, mac


class NonceCache:
    """The nonces of one account's NamesrvSignatures accepted within the window, so that each is
    accepted once: at most ``limit`` of them.  A nonce is forgotten once its time is out of the window
    (a replay is refused for its time then); when full, the one with the oldest time is forgotten
    early.  Either way no time at or before one forgotten is accepted from then on (``floor``), so a
    bounded cache never lets a replay in, not even after the server's clock is set back -- it may
    refuse a fresh request whose clock lags by more than the newest forgotten one.  Nor is a time
    before ``started`` (the server's start) accepted: the nonces of the process before it are gone,
    so a request captured then and replayed after a restart would be taken again.  One cache per
    account (AccessControl): an account that fills its own (a broker's, with times at the window's
    far edge) refuses only its own requests."""

    def __init__(self, window: float, limit: int = NONCE_LIMIT, started: float = float("-inf")) -> None:
        self.window = window
        self.limit = limit
        self.started = started
        self.seen: dict[bytes, float] = {}
        self.by_time: list[tuple[float, bytes]] = []  # a heap
        self.floor = float("-inf")

    def refusal(self, nonce: bytes, stamp: float, now: float) -> str | None:
        """Why this signature's time and nonce are refused, or None, and then it is remembered."""
        if abs(now - stamp) > self.window:
            where = "behind" if now > stamp else "ahead of"
            return (f"is {abs(now - stamp):.0f} s {where} the server's time, beyond "
                    f"aclSignatureWindowSeconds={self.window:g}")
        if stamp < self.started:
            return (f"was signed {self.started - stamp:.3f} s before this server started (what the last one "
                    "remembered is gone; or this machine's clock is behind the server's): send it again")
        if stamp <= self.floor:
            return "is older than the replay cache remembers: send it again"
        if nonce in self.seen:
            return "was seen before: a replayed request"
        while self.by_time and (self.by_time[0][0] < now - self.window or len(self.seen) >= self.limit):
            oldest, gone = heapq.heappop(self.by_time)
            del self.seen[gone]
            self.floor = max(self.floor, oldest)  # nothing at or before it is accepted again
        self.seen[nonce] = stamp
        heapq.heappush(self.by_time, (stamp, nonce))
        return None


class AccessControl:
    """The accounts and whitelists of one ``plain_acl.yml`` (``path``, read again by
    ``reload_if_changed``) and the networks of ``aclBrokerNetworks``; ``clock``, the wall clock a
    NamesrvSignature's time is compared with (injected by the composition root: no default)."""

    def __init__(self, accounts: dict[str, Account], read_required: bool = False,
                 global_white: AddressMatch = _never, broker_networks: AddressMatch = _never,
                 path: str | None = None, *, bound_required: bool = False,
                 window: float = DEFAULT_WINDOW_SECONDS, clock: Callable[[], float]) -> None:
        self.accounts = accounts
        self.read_required = read_required
        self.global_white = global_white
        self.broker_networks = broker_networks
        self.path = path
        self._stamp = _stamp(path) if path else None
        #: aclNamesrvSignatureRequired: operators' requests must carry a NamesrvSignature
        self.bound_required = bound_required
        self.clock = clock
        self.window = window
        #: each account's NamesrvSignature nonces (NonceCache), from the start on: only accounts of the file
        #: whose signature verified have one
        self.nonces: dict[str, NonceCache] = {}
        self.nonce_limit = NONCE_LIMIT
        #: the start to the millisecond, as a NamesrvSignature gives its time: one signed in the very
        #: millisecond the server started is not before it
        self.started = int(clock() * 1000) / 1000

    @classmethod
    def from_file(cls, path: str, read_required: bool = False, broker_networks: str = "", *,
                  bound_required: bool = False, window: float = DEFAULT_WINDOW_SECONDS,
                  clock: Callable[[], float]) -> AccessControl:
        """plain_acl.yml: ``globalWhiteRemoteAddresses`` and ``accounts: [{accessKey, secretKey,
        admin, whiteRemoteAddress}]`` (topic and group permissions are the brokers' business: ignored)."""
        stamp = _stamp(path)
        accounts, global_white = _read_accounts(path)
        control = cls(accounts, read_required, global_white, _networks(broker_networks), path,
                      bound_required=bound_required, window=window, clock=clock)
        control._stamp = stamp
        return control

    def reload_if_changed(self) -> str | None:
        """Read the file again if it changed since it was read: None when unchanged, else what
        happened, for the log (``reloaded: N accounts`` or why the old accounts stay)."""
        if self.path is None:
            return None
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            self.accounts, self.global_white = _read_accounts(self.path)
        except AclConfigError as exc:
            return f"not reloaded, the accounts read before stay: {exc}"
        return f"reloaded {self.path}: {len(self.accounts)} accounts"

    def guards(self, code: int, kind: str | None = None) -> bool:
        return self.read_required or (kind or request_class(code)) != READ

    def refusal(self, code: int, ext: Mapping[str, str | None], body: bytes | memoryview | None,
                remote: str = "", kind: str | None = None) -> str | None:
        """None when the request from ``remote`` (the peer's ``ip:port``) may proceed, else the
        AclException text Java would send.  ``kind``: the request's class when it is not the
        NameServer's code (the controller's: ``controller_request_class``)."""
        kind = kind or request_class(code)
        address = peer_ip(remote)
        if kind != ADMIN and address is not None and (
                self.global_white(address) or (kind == BROKER and self.broker_networks(address))):
            return None
        access_key = ext.get(ACCESS_KEY)
        if not access_key:
            return f"{ACL_EXCEPTION}: No accessKey is configured"
        account = self.accounts.get(access_key)
        if account is None:
            return f"{ACL_EXCEPTION}: No acl config for {access_key}"
        whitelisted = kind != ADMIN and address is not None and account.white(address)
        if not whitelisted and not self._signed_by(account, ext, body):
            return f"{ACL_EXCEPTION}: Check signature failed for accessKey={access_key}"
        if kind == ADMIN and not account.admin:
            return f"{ACL_EXCEPTION}: Need admin permission for request code={code}, but accessKey={access_key} is not"
        bound = ext.get(NAMESRV_SIGNATURE)
        if bound is None and kind == ADMIN and self.bound_required:
            return (f"{ACL_EXCEPTION}: request code={code} needs a {NAMESRV_SIGNATURE} "
                    f"(aclNamesrvSignatureRequired=true), accessKey={access_key} sent none")
        if bound is not None:
            why = self._bound_refusal(account, code, ext, body, bound)
            if why is not None:
                return f"{ACL_EXCEPTION}: {NAMESRV_SIGNATURE} of accessKey={access_key} {why}"
        return None

    def _bound_refusal(self, account: Account, code: int, ext: Mapping[str, str | None],
                       body: bytes | memoryview | None, value: str) -> str | None:
        """Why a NamesrvSignature is refused (malformed, wrong, out of the window, replayed), or None."""
        parsed = parse_bound(value)
        if parsed is None:
            return "is malformed"
        stamp_ms, nonce, mac = parsed
        expected = bound_signature(account.secret_key, code, ext, body, stamp_ms, nonce).rpartition(":")[2]
        if not hmac.compare_digest(base64.b64encode(mac), expected.encode()):
            return "check failed (it covers the request code, every field by name and the body)"
        cache = self.nonces.get(account.access_key)
        if cache is None:
            cache = self.nonces[account.access_key] = NonceCache(self.window, self.nonce_limit, self.started)
        return cache.refusal(nonce, stamp_ms / 1000, self.clock())

    def verified(self, ext: Mapping[str, str | None], body: bytes | memoryview | None) -> str | None:
        """The accessKey whose secret signed this request, or None: a key that is only claimed
        (unknown, unsigned, wrongly signed, or let in by a whitelist) is no identity."""
        access_key = ext.get(ACCESS_KEY)
        account = self.accounts.get(access_key) if access_key else None
        return account.access_key if account is not None and self._signed_by(account, ext, body) else None

    @staticmethod
    def _signed_by(account: Account, ext: Mapping[str, str | None], body: bytes | memoryview | None) -> bool:
        given = ext.get(SIGNATURE) or ""
        return hmac.compare_digest(given.encode("utf-8", "replace"), signature(account.secret_key, ext, body).encode())


def _stamp(path: str) -> tuple[int, int, bytes] | None:
    """What says the file changed: its mtime, size and a digest of its bytes (an edit within the
    mtime's resolution still shows); None when it cannot be read."""
    try:
        data = read_regular(path, TEXT_FILE_LIMIT)  # a FIFO swapped in would block every port (files.py)
        info = Path(path).stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, hashlib.sha256(data).digest()


def parse_networks(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``aclBrokerNetworks``: CIDR networks separated by ``,`` (a bare address is one host); a bad
    one raises ValueError naming it."""
    return [ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip()]


def _networks(text: str) -> AddressMatch:
    """``aclBrokerNetworks`` (checked at start by the config: state/config.py) as one test."""
    networks = parse_networks(text)
    if not networks:
        return _never
    return lambda address: any(address in network for network in networks)


def _read_accounts(path: str) -> tuple[dict[str, Account], AddressMatch]:
    import yaml  # only when ACL is on

    try:
        document = yaml.safe_load(read_regular_text(path, TEXT_FILE_LIMIT))
    except OSError as exc:
        raise AclConfigError(f"aclAccountsFile: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise AclConfigError(f"aclAccountsFile: cannot read {path}: not UTF-8 ({exc.reason})") from None
    except yaml.YAMLError as exc:
        raise AclConfigError(f"aclAccountsFile: cannot read {path}: {_yaml_problem(exc)}") from None
    entries: Any = document.get("accounts") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise AclConfigError(f"aclAccountsFile: {path} has no 'accounts' list")
    accounts = {}
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or not entry.get("accessKey") or not entry.get("secretKey"):
            raise AclConfigError(f"aclAccountsFile: {path}: account {number} needs accessKey and secretKey")
        white = _whitelist(entry.get("whiteRemoteAddress"), f"aclAccountsFile: {path}: account {number}")
        account = Account(str(entry["accessKey"]), str(entry["secretKey"]), entry.get("admin") is True, white)
        accounts[account.access_key] = account
    global_white = _whitelist(document.get("globalWhiteRemoteAddresses"),
                              f"aclAccountsFile: {path}: globalWhiteRemoteAddresses")
    return accounts, global_white


def _yaml_problem(exc: Exception) -> str:
    """A YAML error as its kind and position only: PyYAML's message quotes the offending line,
    which in this file may hold a secretKey."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "not YAML"
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"not valid YAML: {problem}{where}"
