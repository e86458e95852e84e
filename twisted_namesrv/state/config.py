"""NamesrvConfig and the server keys, with Java's names and defaults.

One ``ConfigKey`` table: the generation a key belongs to, its default (and so its type), and
whether it is guarded: keys that would change listening, threads, queues, limits, paths or whether lookups are
answered are
refused by UPDATE_NAMESRV_CONFIG with 16, like Java's configBlackList but complete.

The keys a NamesrvConfig knows are a ``ConfigSchema`` it is given: ``NAMESRV_SCHEMA`` holds the
NameServer's own; a process that runs more (the embedded controller) passes a schema extended with
that module's keys and checks (``ConfigSchema.with_keys``; the NameServer's launchers use
``schema.SERVER_SCHEMA``).  Nothing adds keys to a shared table, so what ``-p``, ``--strict-config``
and ``is_secret`` say does not depend on what was imported.

Two sets beside it are data every consumer consults rather than decides for itself:
``SECRET_KEYS`` (their values never leave the process: GET_NAMESRV_CONFIG leaves them out as Java
leaves its TLS system properties out, ``-p``, logs, errors, the status page and the audit trail show
``MASK``), ``NOT_IMPLEMENTED`` and ``NO_EFFECT`` (Java keys this server takes but does not act on: a
start with one of them set warns) and ``JAVA_ONLY`` (keys of Java's other config objects that
``mqnamesrv -c`` reads from the same file, ``ConfigSchema.java_only``: known, so ``--strict-config``,
which refuses only keys no Java NameServer reads, accepts a file Java wrote, and a warning when set).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import properties
from ..bodies.register import DEFAULT_MAX_INFLATED
from ..compat import Profile, profile_named
from ..escapes import escaped, first_control
from ..remoting.fastjson import java_hash_order
from ..remoting.frame import DEFAULT_MAX_FRAME_LENGTH
from ..remoting.values import JAVA_INTEGER
from .acl import DEFAULT_WINDOW_SECONDS, parse_networks
from .files import TEXT_FILE_LIMIT, cannot_look, read_regular
from .hosts import AllowedHostsError, parse_allowed, written_as_list

#: descriptors kept free for the stores by default (fdReserve, budget.py): the KV, config, snapshot and
#: event writers hold two at most (the file and its directory, for the fsync), one at a time; the accounts
#: reload and a log rotation one; pushes to brokers and the peers view a few connections
DEFAULT_FD_RESERVE = 64
#: NettyServerConfig.listenPort of a NameServer: where brokers and clients look first
DEFAULT_LISTEN_PORT = 9876

V4 = frozenset({"4.9.8"})
V5 = frozenset({"5.3.3"})
BOTH = V4 | V5
OURS: frozenset[str] = frozenset()  # our own keys: listed only when set in the properties file


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    default: Any
    generations: frozenset[str]
    #: changes listening, threads, queues, limits, paths or whether lookups are answered: UPDATE_NAMESRV_CONFIG
    #: refuses it
    guarded: bool = False


def _home() -> str:
    return os.path.expanduser("~")


# Java declaration order (NamesrvConfig, then NettyServerConfig): GET_NAMESRV_CONFIG's order follows it.
KEYS: list[ConfigKey] = [
    ConfigKey("rocketmqHome", os.environ.get("ROCKETMQ_HOME"), BOTH, guarded=True),
    ConfigKey("kvConfigPath", os.path.join(_home(), "namesrv", "kvConfig.json"), BOTH, guarded=True),
    ConfigKey("configStorePath", os.path.join(_home(), "namesrv", "namesrv.properties"), BOTH, guarded=True),
    ConfigKey("productEnvName", "center", BOTH),
    ConfigKey("clusterTest", False, BOTH),
    ConfigKey("orderMessageEnable", False, BOTH),
    ConfigKey("returnOrderTopicConfigToBroker", True, V5),
    ConfigKey("clientRequestThreadPoolNums", 8, V5, guarded=True),
    ConfigKey("defaultThreadPoolNums", 16, V5, guarded=True),
    ConfigKey("clientRequestThreadPoolQueueCapacity", 50000, V5, guarded=True),
    ConfigKey("defaultThreadPoolQueueCapacity", 10000, V5, guarded=True),
    ConfigKey("scanNotActiveBrokerInterval", 5000, V5, guarded=True),
    ConfigKey("unRegisterBrokerQueueCapacity", 3000, V5, guarded=True),
    ConfigKey("supportActingMaster", False, V5),
    ConfigKey("enableAllTopicList", True, V5),
    ConfigKey("enableTopicList", True, V5),
    ConfigKey("notifyMinBrokerIdChanged", False, V5),
    ConfigKey("enableControllerInNamesrv", False, V5, guarded=True),
    # guarded: they hold every route lookup after the start (at runtime, 2147483647 s held them at once, for good)
    ConfigKey("needWaitForService", False, V5, guarded=True),
    ConfigKey("waitSecondsForService", 45, V5, guarded=True),
    ConfigKey("deleteTopicWithBrokerRegistration", False, V5),
    ConfigKey("configBlackList", "configBlackList;configStorePath;kvConfigPath", BOTH, guarded=True),
    ConfigKey("bindAddress", "127.0.0.1", V5, guarded=True),
    ConfigKey("listenPort", DEFAULT_LISTEN_PORT, BOTH, guarded=True),
    ConfigKey("serverWorkerThreads", 8, BOTH, guarded=True),
    ConfigKey("serverCallbackExecutorThreads", 0, BOTH, guarded=True),
    ConfigKey("serverSelectorThreads", 3, BOTH, guarded=True),
    ConfigKey("serverOnewaySemaphoreValue", 256, BOTH, guarded=True),
    ConfigKey("serverAsyncSemaphoreValue", 64, BOTH, guarded=True),
    ConfigKey("serverChannelMaxIdleTimeSeconds", 120, BOTH, guarded=True),
    ConfigKey("serverSocketSndBufSize", 0, BOTH, guarded=True),
    ConfigKey("serverSocketRcvBufSize", 0, BOTH, guarded=True),
    ConfigKey("writeBufferHighWaterMark", 0, BOTH, guarded=True),
    ConfigKey("writeBufferLowWaterMark", 0, BOTH, guarded=True),
    ConfigKey("serverSocketBacklog", 1024, BOTH, guarded=True),
    ConfigKey("serverNettyWorkerGroupEnable", True, V5, guarded=True),
    ConfigKey("serverPooledByteBufAllocatorEnable", True, BOTH),
    ConfigKey("enableShutdownGracefully", False, V5, guarded=True),
    ConfigKey("shutdownWaitTimeSeconds", 30, V5, guarded=True),
    ConfigKey("useEpollNativeSelector", False, BOTH, guarded=True),
    ConfigKey("compatVersion", "5.3.3", OURS, guarded=True),
    ConfigKey("frameMaxLength", DEFAULT_MAX_FRAME_LENGTH, OURS, guarded=True),
    ConfigKey("aclEnable", False, OURS, guarded=True),
    ConfigKey("aclAccountsFile", "", OURS, guarded=True),
    ConfigKey("aclReadRequired", False, OURS, guarded=True),
    #: networks (CIDR, ``,``-separated) whose brokers register, heartbeat and unregister unsigned (state/acl.py)
    ConfigKey("aclBrokerNetworks", "", OURS, guarded=True),
    #: operators' requests (KV, permissions, topics, config) must also carry a NamesrvSignature, which binds
    #: the request code and the fields and is accepted once within the window (state/acl.py); Java's mqadmin
    #: sends none, namesrv-admin does
    ConfigKey("aclNamesrvSignatureRequired", False, OURS, guarded=True),
    #: how far a NamesrvSignature's time may be from the server's (seconds, either way)
    ConfigKey("aclSignatureWindowSeconds", DEFAULT_WINDOW_SECONDS, OURS, guarded=True),
    ConfigKey("tls.server.mode", "disabled", OURS, guarded=True),
    ConfigKey("tls.server.certPath", "", OURS, guarded=True),
    ConfigKey("tls.server.keyPath", "", OURS, guarded=True),
    ConfigKey("tls.server.keyPassword", "", OURS, guarded=True),
    ConfigKey("tls.server.authClient", False, OURS, guarded=True),
    ConfigKey("tls.server.trustCertPath", "", OURS, guarded=True),
    ConfigKey("headerMaxLength", 65536, OURS, guarded=True),
    ConfigKey("inflateMaxLength", DEFAULT_MAX_INFLATED, OURS, guarded=True),
    ConfigKey("maxConnections", 10000, OURS, guarded=True),
    #: connections one peer host (an IPv6 host's /64) may hold on the remoting port; 0: no limit, as
    #: Java (clients behind SNAT share an address)
    ConfigKey("maxConnectionsPerHost", 0, OURS, guarded=True),
    #: bytes of unfinished frames and inflating bodies held for all peers together; 0: a quarter of the
    #: machine's memory limit within 64..256 MiB (budget.py)
    ConfigKey("receiveMemoryBudget", 0, OURS, guarded=True),
    #: what the route tables may hold (state/routes.py; maxTopicsPerBroker also bodies/register.py):
    #: a registration that would pass one is refused whole, logged and counted
    ConfigKey("maxTopicsPerBroker", 2_000_000, OURS, guarded=True),
    ConfigKey("maxBrokerGroups", 20_000, OURS, guarded=True),
    ConfigKey("maxBrokers", 100_000, OURS, guarded=True),
    ConfigKey("maxBrokersPerGroup", 64, OURS, guarded=True),
    ConfigKey("maxTopicQueueEntries", 8_000_000, OURS, guarded=True),
    #: the longest topic, broker or cluster name, address or zone a registration (or REGISTER_TOPIC_IN_NAMESRV)
    #: may hold: the table limits count entries, and what one entry holds must be bounded too
    ConfigKey("maxNameLength", 512, OURS, guarded=True),
    #: the KV table's size, as written to kvConfigPath: every PUT_KV_CONFIG rewrites it whole, in the reactor
    ConfigKey("maxKvBytes", 8 * 1024 * 1024, OURS, guarded=True),
    #: ORDER_TOPIC_CONFIG's own object in that file: 5.x hands the whole namespace to every broker in
    #: each registration and heartbeat answer (returnOrderTopicConfigToBroker); about 17,000 order
    #: topics at 60 bytes each.  A key as the other limits are: a cluster with more raises it
    ConfigKey("maxOrderTopicConfigBytes", 1 << 20, OURS, guarded=True),
    ConfigKey("metricsPort", 0, OURS, guarded=True),
    ConfigKey("metricsBindAddress", "127.0.0.1", OURS, guarded=True),
    # without ACL the status page and /api go to loopback peers only; true opens them to every peer
    # (for a page kept behind the operator's own network rules)
    ConfigKey("httpOpenBeyondLoopback", False, OURS, guarded=True),
    #: more names and addresses the HTTP side answers to, beyond its own (state/hosts.py): names,
    #: ``*.domain``, addresses, CIDR networks, ``,``-separated (a Service name, a NAT address)
    ConfigKey("httpAllowedHosts", "", OURS, guarded=True),
    #: the HTTP side's connections, apart from maxConnections (web/connections.py); 0: no limit
    ConfigKey("httpMaxConnections", 128, OURS, guarded=True),
    #: an HTTP connection with nothing received this long is closed; 0: never
    ConfigKey("httpIdleTimeoutSeconds", 30, OURS, guarded=True),
    #: a request whose line, headers and body are not all in this long after its first byte is closed; 0: never
    ConfigKey("httpRequestTimeoutSeconds", 10, OURS, guarded=True),
    #: descriptors (ulimit -n) kept free for the stores: no port accepts a connection that would take them
    #: (budget.py: FdBudget; at most a quarter of the limit); 0: none kept
    ConfigKey("fdReserve", DEFAULT_FD_RESERVE, OURS, guarded=True),
    ConfigKey("routeSnapshotPath", "", OURS, guarded=True),
    ConfigKey("routeSnapshotInterval", 10_000, OURS, guarded=True),
    #: a snapshot not confirmed current for longer than this (ms) is not served: its brokers would have
    #: expired had a NameServer been running (the brokers' 120 s heartbeat timeout); 0: any age
    ConfigKey("routeSnapshotMaxAge", 120_000, OURS, guarded=True),
    #: the broker groups seen across restarts (topology_store.py); empty: topology.json beside kvConfigPath
    ConfigKey("topologyPath", "", OURS, guarded=True),
    #: /readyz waits this long (ms) after the start for the known broker groups to register again: brokers
    #: register every 30 s, so 45 s (Java's waitSecondsForService) covers one round and a slow one; guarded:
    #: set remotely to 2^63-1, a group up before the start that never came back (a peer's fake one) kept
    #: /readyz failing, the pod out of its Service, until the next restart
    ConfigKey("readinessBrokerWait", 45_000, OURS, guarded=True),
    #: the status page's events across restarts (event_log.py); empty: events.json beside kvConfigPath
    ConfigKey("eventsPath", "", OURS, guarded=True),
    #: what /rocketmq/nsaddr answers (``host:port;host:port``); empty: this server's own address
    ConfigKey("nsaddrList", "", OURS, guarded=True),
    #: the other NameServers of the cluster (``-n``, as mqnamesrv takes it): the status page's peers view
    ConfigKey("namesrvAddr", "", OURS, guarded=True),
    #: what clients can reach this server at (host or host:port), for /rocketmq/nsaddr without nsaddrList;
    #: $NAMESRV_ADVERTISED_ADDRESS when neither the command line nor the file sets it (the pod IP, a Service name)
    ConfigKey("advertisedAddress", "", OURS, guarded=True),
    #: how often the peers view compares routes with the namesrvAddr / nsaddrList NameServers (ms)
    ConfigKey("peersCompareInterval", 30_000, OURS, guarded=True),
]
#: keys Java's mqnamesrv reads from its ``-c`` file (NettyServerConfig's, 5.3.3) whose default here is not
#: Java's, with Java's: loopback here, every address there (configStorePath leaves them out unless set)
OURS_NOT_JAVAS_DEFAULT = {"bindAddress": "0.0.0.0"}
#: the NameServer's own keys by name (never grown: a schema with more keys is a ConfigSchema of its own)
KEYS_BY_NAME = {k.name: k for k in KEYS}
ALWAYS_BLOCKED = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"})

#: keys whose values are secrets (key passwords, secret keys, tokens): the one list every output consults
SECRET_KEYS = frozenset({"tls.server.keyPassword", "tls.client.keyPassword", "secretKey", "securityToken",
                         "accessToken", "authToken"})
#: a key no table knows (kept as it came, in ``extra``) is a secret too when its name ends in one of these
SECRET_NAME_ENDINGS = ("password", "secretkey", "secret", "token", "credential", "credentials")
#: what a secret's value is shown as
MASK = "******"
#: Java NamesrvConfig keys asking for what this server does not do: set to anything but their default
#: they start with a warning saying so (a Java key: --strict-config accepts it).  Issue work that
#: implements one removes it.
NOT_IMPLEMENTED = frozenset({
    "productEnvName",  # Java: only with clusterTest
    "clusterTest",  # Java: routes of a test cluster fetched from another NameServer
    "clientRequestThreadPoolNums", "defaultThreadPoolNums",  # one reactor thread here
    "clientRequestThreadPoolQueueCapacity", "defaultThreadPoolQueueCapacity", "unRegisterBrokerQueueCapacity",
})
_ONE_THREAD = "one reactor thread serves every connection and request: there is no pool to size"
_NETTY = "a Netty setting; Twisted's reactor has no counterpart"
#: every Java key that changes nothing here, with why: ``-p`` says so above each, and a start with one
#: set to anything but its default warns (rocketmqHome too, which Java writes into every file it saves)
NO_EFFECT: dict[str, str] = {
    "rocketmqHome": "Java reads its logback configuration there; logging here is Twisted's (--log-*)",
    "productEnvName": "Java uses it only with clusterTest, which is not implemented",
    "clusterTest": "not implemented: routes of a test cluster fetched from another NameServer",
    **dict.fromkeys(("clientRequestThreadPoolNums", "defaultThreadPoolNums", "clientRequestThreadPoolQueueCapacity",
                     "defaultThreadPoolQueueCapacity", "unRegisterBrokerQueueCapacity", "serverWorkerThreads",
                     "serverCallbackExecutorThreads", "serverSelectorThreads"), _ONE_THREAD),
    "serverOnewaySemaphoreValue": "the NameServer sends no oneway requests of its own to bound",
    "serverAsyncSemaphoreValue": "the NameServer sends no asynchronous requests of its own to bound",
    **dict.fromkeys(("serverSocketSndBufSize", "serverSocketRcvBufSize", "writeBufferHighWaterMark",
                     "writeBufferLowWaterMark", "serverNettyWorkerGroupEnable", "serverPooledByteBufAllocatorEnable",
                     "useEpollNativeSelector"), _NETTY),
    "enableShutdownGracefully": "a stop here always closes the listeners first and the connections after",
    "shutdownWaitTimeSeconds": "a stop here does not wait for requests in flight: each is answered in one step",
}
_CLIENT = ("a setting of Java's NameServer's Netty client (its NOTIFY_MIN_BROKER_ID_CHANGE and controller notices "
           "to brokers); this server sends each notice on a connection of its own, 3 s to connect")
#: keys ``mqnamesrv -c`` reads into Java objects this server has no counterpart for, with why they change
#: nothing here: NettyClientConfig's (5.3.3 reads them from the -c file; 4.9.8 ignores them); a schema
#: with another module's keys adds that module's (schema.SERVER_SCHEMA: the embedded controller's).  Known, so
#: --strict-config accepts them; set (to anything) they warn, as a Java file carries them only when an
#: operator wrote them in.  GET_NAMESRV_CONFIG lists them as Java does the -c file's other keys.
JAVA_ONLY: dict[str, str] = dict.fromkeys((
    "clientWorkerThreads", "clientCallbackExecutorThreads", "clientOnewaySemaphoreValue", "clientAsyncSemaphoreValue",
    "connectTimeoutMillis", "channelNotActiveInterval", "scanAvailableNameSrv", "clientChannelMaxIdleTimeSeconds",
    "clientSocketSndBufSize", "clientSocketRcvBufSize", "clientPooledByteBufAllocatorEnable",
    "clientCloseSocketIfTimeout", "useTLS", "socksProxyConfig", "disableCallbackExecutor", "disableNettyWorkerGroup",
    "maxReconnectIntervalTimeSeconds", "enableReconnectForGoAway"), _CLIENT)
# (NettyClientConfig has writeBufferHighWaterMark and writeBufferLowWaterMark too: NettyServerConfig keys here)


def is_secret(name: str) -> bool:
    """Whether ``name`` holds a secret: in SECRET_KEYS, or not one of the NameServer's own keys and
    named like one.  The same answer whatever schema a config was given or what was imported."""
    return name in SECRET_KEYS or (name not in KEYS_BY_NAME and name.lower().endswith(SECRET_NAME_ENDINGS))


def masked(props: dict[str, Any]) -> dict[str, Any]:
    """``props`` for a log line or an error: secret values replaced by MASK."""
    return {name: MASK if is_secret(name) and value not in (None, "") else value for name, value in props.items()}


TLS_MODES = ("disabled", "permissive", "enforcing")  # RocketMQ's TlsMode
#: numeric keys the server acts on: (lowest, highest or None)
_RANGES: dict[str, tuple[int, int | None]] = {
    "listenPort": (0, 65535),
    "metricsPort": (0, 65535),
    "frameMaxLength": (1024, (1 << 31) - 1),
    "headerMaxLength": (64, None),
    "inflateMaxLength": (1024, None),
    "maxConnections": (0, None),
    "maxConnectionsPerHost": (0, None),
    "receiveMemoryBudget": (0, None),
    "maxTopicsPerBroker": (1, None),
    "maxBrokerGroups": (1, None),
    "maxBrokers": (1, None),
    "maxBrokersPerGroup": (1, None),
    "maxTopicQueueEntries": (1, None),
    "maxNameLength": (16, None),
    "maxKvBytes": (0, None),
    "maxOrderTopicConfigBytes": (0, None),
    "httpMaxConnections": (0, None),
    "httpIdleTimeoutSeconds": (0, None),
    "httpRequestTimeoutSeconds": (0, None),
    "fdReserve": (0, None),
    "aclSignatureWindowSeconds": (1, 86_400),
    "serverChannelMaxIdleTimeSeconds": (0, None),
    "scanNotActiveBrokerInterval": (100, None),
    "waitSecondsForService": (0, None),
    "routeSnapshotInterval": (100, None),
    "routeSnapshotMaxAge": (0, None),
    "readinessBrokerWait": (0, None),
    "peersCompareInterval": (1000, None),
}


class ConfigError(ValueError):
    """An invalid configuration; the message names the key."""


def _check_networks(text: str) -> None:
    try:
        parse_networks(text)
    except ValueError as exc:
        raise ConfigError(f"aclBrokerNetworks: {exc} (expected CIDR networks separated by ',', "
                          "e.g. 10.0.0.0/8,192.168.1.0/24)") from None


def nsaddr_entries(text: str) -> list[str]:
    """The ``host:port`` entries of an ``nsaddrList`` / ``namesrvAddr`` as this server reads them: split
    at ``;``, each without the white space around it (a space, a CR or a line separator a file left
    there), empty ones dropped.  What is checked and what the address server answers (joined again):
    Java's clients split that answer at ``;`` and read each entry as it is, so an entry served with
    the ``\u2028`` it was checked without was ``127.0.0.1:9876\u2028``, a port that is no number."""
    return [entry for entry in (part.strip() for part in text.split(";")) if entry]


def _check_nsaddr_list(name: str, text: str) -> None:
    """``nsaddrList`` / ``namesrvAddr``: empty or ``host:port`` entries joined by ``;``, as clients split it.
    An entry with a comma or a space is a list written with another separator: taken as one
    ``host:port`` (the last entry's port) it named no server and nothing said so."""
    for entry in nsaddr_entries(text):
        if written_as_list(entry):
            raise ConfigError(f"{name}: {entry!r} is not host:port: NameServers are separated by ';' "
                              "(host:port;host:port)")
        host, _, port = entry.rpartition(":")
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) <= 65535:  # (not '²')
            raise ConfigError(f"{name}: {entry!r} is not host:port (a port 1 to 65535)")


#: where advertisedAddress comes from when neither the command line nor the -c file sets it
ADVERTISED_ADDRESS_ENV = "NAMESRV_ADVERTISED_ADDRESS"


def _check_advertised(text: str) -> None:
    """``advertisedAddress``: empty, a host, ``host:port`` or ``[v6]:port``; one address, no list."""
    text = text.strip()
    if not text:
        return
    if ";" in text or "," in text or " " in text:
        raise ConfigError(f"advertisedAddress: {text!r} is one address (host or host:port), not a list; "
                          "a list of NameServers is nsaddrList")
    if any(c.isspace() for c in text):  # a CR, tab or line separator inside: answered so by /rocketmq/nsaddr
        raise ConfigError(f"advertisedAddress: {text!r} is not host or host:port (white space inside)")
    host, port = split_advertised(text)
    if not host or (port is not None and not 0 < port <= 65535):
        raise ConfigError(f"advertisedAddress: {text!r} is not host or host:port (a port 1 to 65535)")


def split_advertised(text: str) -> tuple[str, int | None]:
    """``host`` / ``host:port`` / ``[v6]`` / ``[v6]:port`` / a bare IPv6 address -> (host, port or None)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, None
    if port is None:
        return host, None
    return host, int(port) if port.isascii() and port.isdigit() else -1  # '²' is a digit to isdigit, not to int


@dataclass(frozen=True)
class ConfigSchema:
    """The keys a NamesrvConfig knows (typed by their defaults, guarded or not, listed in this
    order), the checks their owners run on the values (ConfigError naming the key), the keys
    other modules read from the same ``-c`` file but keep in config objects of their own (never an
    "unknown key" here, never changed by UPDATE_NAMESRV_CONFIG), and Java's keys of those modules
    that nothing here reads, with why (``java_only``: JAVA_ONLY's kind; known, so --strict-config
    accepts a file Java wrote, and a warning when set)."""

    keys: tuple[ConfigKey, ...]
    checks: tuple[Callable[[dict[str, Any]], None], ...] = ()
    kept_elsewhere: frozenset[str] = frozenset()
    java_only: Mapping[str, str] = field(default_factory=dict, hash=False)
    by_name: dict[str, ConfigKey] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {key.name: key for key in self.keys})

    def with_keys(self, keys: tuple[ConfigKey, ...], check: Callable[[dict[str, Any]], None],
                  kept_elsewhere: frozenset[str] = frozenset(),
                  java_only: Mapping[str, str] | None = None) -> ConfigSchema:
        """This schema and a module's own ``keys`` (listed after these), ``check``, the further
        keys it keeps elsewhere and its Java keys without effect here: a new schema, this one unchanged."""
        added = tuple(key for key in keys if key.name not in self.by_name)
        return ConfigSchema(self.keys + added, (*self.checks, check), self.kept_elsewhere | kept_elsewhere,
                            {**self.java_only, **(java_only or {})})

    def known(self, name: str) -> bool:
        """A key of this schema, or one a module keeps elsewhere."""
        return name in self.by_name or name in self.kept_elsewhere


#: the NameServer's own keys, and its Java NettyClientConfig keys that change nothing here
NAMESRV_SCHEMA = ConfigSchema(tuple(KEYS), java_only=JAVA_ONLY)


#: the largest UPDATE_NAMESRV_CONFIG / UPDATE_CONTROLLER_CONFIG body read: the whole configuration is
#: under 4 KiB, and properties text is read a line at a time in Python (a 16 MiB body of newlines held
#: the reactor for seconds)
CONFIG_BODY_LIMIT = 64 * 1024


def oversized(body: bytes | memoryview) -> str | None:
    """Why a config update's body is refused unread (a refusal ``config_size``), or None."""
    if len(body) <= CONFIG_BODY_LIMIT:
        return None
    return f"a body of {len(body)} bytes is over {CONFIG_BODY_LIMIT} (the whole configuration is under 4 KiB)"


def control_characters(props: dict[str, str]) -> str | None:
    """Why UPDATE_NAMESRV_CONFIG / UPDATE_CONTROLLER_CONFIG refuse ``props`` (NO_PERMISSION, a
    refusal ``config_value``), or None: a key or value holding a control character (escapes.CONTROLS:
    C0, DEL, C1, line and paragraph separators, bidirectional controls, lone surrogates).  Java takes
    such a value and writes it raw into its config file; here the file would hold it escaped
    (properties.py), but no setting needs one, and a remote peer's control characters have no
    business in a file, a log or an answer."""
    for name, text in props.items():
        control = first_control(name) or first_control(text)
        if control:
            return f"{escaped(name)} holds a control character ({control}); values with control characters are refused"
    return None


#: what Java's String.trim() takes off both ends: every character up to U+0020 (Python's strip() takes
#: Unicode whitespace instead: U+0085, U+2028, ... but not \x00..\x08)
JAVA_TRIMMED = "".join(map(chr, range(0x21)))


def _coerce(key: ConfigKey, text: str) -> Any:
    """MixAll.properties2Object: the value trimmed (String.trim), then parsed by the field's type."""
    text = text.strip(JAVA_TRIMMED)
    default = key.default
    if isinstance(default, bool):
        return text.lower() == "true"  # Boolean.parseBoolean
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{key.name}: not a number: {text!r}") from None
    return text


def _check_value(key: ConfigKey, text: str) -> str | None:
    """Why a file's value does not parse for the key's type, or None.  Stricter than Java on
    purpose: Boolean.parseBoolean reads ``maybe`` as false, and a typo would pass unseen."""
    text = text.strip()
    if isinstance(key.default, bool):
        return None if text.lower() in ("true", "false") else "not a boolean (true or false)"
    if isinstance(key.default, int):
        return None if JAVA_INTEGER.fullmatch(text) else "not a number"
    return None


#: an unknown key this long or longer gets no suggestion (difflib's work grows with its length)
_SUGGESTED_UP_TO = 100


def nearest_key(name: str, schema: ConfigSchema = NAMESRV_SCHEMA) -> str | None:
    """The known key an unknown ``name`` most likely meant, or None: the same but for case
    (``listenport``; Java's keys are case-sensitive, so Java ignores it in silence), else the
    closest by difflib's ratio, 0.8 or more (``orderMessageEnabled``, ``bindAddr``, ``metricPort``)."""
    if len(name) >= _SUGGESTED_UP_TO:
        return None
    known = [*schema.by_name, *schema.kept_elsewhere, *schema.java_only]
    same_but_case = [k for k in known if k.lower() == name.lower()]
    if same_but_case:
        return same_but_case[0]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    return close[0] if close else None


def _java_reads_otherwise(key: ConfigKey, text: str) -> str | None:
    """What Java's mqnamesrv makes of a number or boolean with white space around it, when that is
    not what this server makes of it; None otherwise.  Properties.load keeps the white space at a
    value's end (a space before the line's end, unseen in an editor), and MixAll.properties2Object
    trims only strings: Integer.parseInt refuses ``9877 `` (the key keeps its default, in silence)
    and Boolean.parseBoolean reads ``true `` as false.  This server trims, as for strings."""
    default = key.default
    if not key.generations or not isinstance(default, (bool, int)):
        return None
    ours = _coerce(key, text)
    if isinstance(default, bool):
        java = text.lower() == "true"
        return None if java == ours else f"Java's mqnamesrv reads {_text(java)} (Boolean.parseBoolean does not trim)"
    if ours == (int(text) if JAVA_INTEGER.fullmatch(text) else default):
        return None
    return f"Java's mqnamesrv ignores it and keeps {default} (Integer.parseInt does not trim)"


def check_file_keys(path: str, file_keys: dict[str, str], strict: bool = False,
                    schema: ConfigSchema = NAMESRV_SCHEMA) -> list[str]:
    """Warnings for keys no setting of ``schema`` has (Java ignores them), for Java keys set to what
    this server does not do (NOT_IMPLEMENTED, NO_EFFECT) and for Java keys it has no counterpart for
    (``schema.java_only``); a value that does not parse raises ConfigError naming key, value (never a
    secret) and file, and so, with ``strict``, does a key no NameServer reads: a file Java itself wrote
    (every key of its NamesrvConfig and NettyServerConfig, rocketmqHome included) passes."""
    warnings = []
    for name, text in file_keys.items():
        key = schema.by_name.get(name)
        if key is None and name in schema.kept_elsewhere:
            continue  # another module's (the embedded controller's: controller/config.py checks them)
        if key is None and name in schema.java_only:
            warnings.append(f"{path}: {name}={MASK if is_secret(name) else text.strip()}: no effect here, ignored "
                            f"({schema.java_only[name]})")
            continue
        if key is None:
            meant = nearest_key(name, schema)
            if strict:
                raise ConfigError(f"{path}: unknown key {escaped(name)} (refused by --strict-config"
                                  f"{f'; did you mean {meant}?' if meant else ''})")
            guess = f"did you mean {meant}?" if meant else "a typo?"
            warnings.append(f"{path}: unknown key {escaped(name)}, ignored ({guess} --strict-config refuses "
                            "unknown keys)")
            continue
        control = first_control(name) or first_control(text.strip(JAVA_TRIMMED))  # the value as taken
        if control and not isinstance(key.default, (bool, int)):  # a number's or boolean's: parsed without it
            warnings.append(f"{path}: {escaped(name)}: holds a control character ({control}), kept as read "
                            "(UPDATE_NAMESRV_CONFIG refuses such values; the file is written with it escaped)")
        problem = _check_value(key, text)
        if problem:
            shown = MASK if is_secret(name) else escaped(text.strip())
            raise ConfigError(f"{path}: {name}={shown}: {problem}")
        java_reads = _java_reads_otherwise(key, text)
        if java_reads:
            ours = _text(_coerce(key, text))
            warnings.append(f"{path}: {name}='{escaped(text)}' has white space around the value: taken as {ours} "
                            f"here, while {java_reads}; remove the white space for both to read {ours}")
        if name in NO_EFFECT and _coerce(key, text) != key.default:
            if name in NOT_IMPLEMENTED:
                warnings.append(f"{path}: {name}={escaped(text.strip())}: not implemented, ignored "
                                "(this NameServer does not do what the key asks)")
            else:
                warnings.append(f"{path}: {name}={escaped(text.strip())}: no effect here, ignored ({NO_EFFECT[name]})")
    return warnings


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def read_properties(path: str, what: str = "cannot read config file") -> dict[str, str]:
    """The keys of a properties file (Java's Properties.load rules, properties.py) read as UTF-8
    (a file that is not, as ISO-8859-1, as Java reads it: ``properties.decode_file``), a regular
    file only (state/files.py); ConfigError starting with ``what`` says why not.  A byte-order mark
    at the start (what Windows editors write) is read past: Java reads it as part of the first key,
    which then names no setting and its value is dropped in silence."""
    return read_properties_file(path, what)[0]


def read_properties_file(path: str, what: str = "cannot read config file") -> tuple[dict[str, str], list[str]]:
    """``read_properties`` and a warning for each key the file sets more than once: the last is
    used, as Java's Properties.load does, and Java says nothing of the others, so a line appended
    at the end (``listenPort=9877``) silently beat the one an operator reads at the top; one when
    the file is not UTF-8 (read as ISO-8859-1); and one when a byte-order mark glued to the first
    key made Java ignore that setting (``bom_hid``)."""
    try:
        data = read_regular(path, TEXT_FILE_LIMIT)
        text, not_utf8 = properties.decode_file(data)
        read = list(properties.pairs(text))
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}") from None
    except properties.PropertiesError as exc:
        raise ConfigError(f"{what} {path}: not a properties file ({exc})") from None
    notes = [f"{path}: {not_utf8}: read as ISO-8859-1, as Java's mqnamesrv reads every -c file "
             "(an update saved to it writes UTF-8)"] if not_utf8 else []
    hidden = bom_hid(data, text, read)
    if hidden:
        name, value = hidden
        notes.append(f"{path}: starts with a byte-order mark (a Windows editor's): read past here, while Java's "
                     f"mqnamesrv reads it as part of the first key and so ignores "
                     f"{escaped(name)}={MASK if is_secret(name) else escaped(value.strip())}")
    return dict(read), notes + repeated_keys(path, read)


def bom_hid(data: bytes, text: str, read: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The setting a byte-order mark at the start of ``data`` (its text ``text``, its keys and values
    ``read`` in order) hid from Java, or None.  Java reads the mark as a character of the first line:
    a comment there stops being one (harmless, a key nobody reads), but a first line that sets a key
    sets ``\ufeff`` + the key, and the setting itself is ignored in silence, unless set again below."""
    if not data.startswith(properties.BOM) or not read or text[:1] in " \t\f#!\r\n":
        return None
    name, value = read[0]
    return None if any(later == name for later, _ in read[1:]) else (name, value)


def repeated_keys(path: str, read: list[tuple[str, str]]) -> list[str]:
    """A warning for each key of ``read`` (a file's keys and values in order) given more than once,
    naming the value used (a secret's masked)."""
    values: dict[str, list[str]] = {}
    for name, text in read:
        values.setdefault(name, []).append(text)
    return [f"{path}: {escaped(name)} set {len(texts)} times, the last used: {escaped(name)}="
            f"{MASK if is_secret(name) else escaped(texts[-1].strip())} (as Java's Properties.load; "
            "the earlier lines are ignored)"
            for name, texts in values.items() if len(texts) > 1]


def _saved_exists(store: str) -> bool:
    """Whether configStorePath holds values saved at runtime; ConfigError naming the directory, its
    owner and ours when it cannot even be looked at (another user's data dir, mode 0700)."""
    try:
        return Path(store).exists()
    except OSError as exc:
        raise ConfigError(f"configStorePath={store}: {cannot_look(store, exc)}") from None


#: 4.9.8's scanNotActiveBroker period (NamesrvController schedules it every 10 s, not configurable)
FIXED_SCAN_INTERVAL_MS = 10_000


class NamesrvConfig:
    """The running configuration: Java's keys for the chosen generation plus our own."""

    def __init__(self, values: dict[str, Any] | None = None, file_keys: dict[str, str] | None = None,
                 schema: ConfigSchema = NAMESRV_SCHEMA) -> None:
        #: the keys this config knows (state/config.py's module docstring)
        self.schema = schema
        #: where a value not at its default came from: "command line" or a file's path (from_file)
        self.sources: dict[str, str] = {}
        self.values: dict[str, Any] = {k.name: k.default for k in schema.keys}
        self.extra: dict[str, str] = {}  # keys from the file that no config object knows
        #: without -c, the keys of configStorePath this server does not read back (unknown to it, or
        #: guarded, as rocketmqHome): written back as they were when it saves the file, where it has
        #: no value of its own, so a file Java wrote keeps what Java reads from it (``-c``) after a swap back
        self.kept_in_store: dict[str, str] = {}
        self.file_keys = set(file_keys or ())
        self.warnings: list[str] = []  # what from_file found suspicious in the file
        #: why the running values differ from configStorePath's (a runtime change whose save failed: it
        #: lasts until the restart); empty when the file holds them
        self.unsaved = ""
        self._subscribers: list[Callable[[], None]] = []
        #: the updates applied so far (``apply``): what was worked out under the values of one
        #: revision holds while it is the revision (a broker's renewal: state/routes.py)
        self.revision = 0
        self._set(file_keys or {})
        self.values.update(values or {})
        self.profile: Profile = profile_named(str(self.values["compatVersion"]))
        self._validate()

    @property
    def scan_interval_s(self) -> float:
        """How often the expiry scan looks for silent brokers: scanNotActiveBrokerInterval where the
        generation reads it (5.3.3), else 4.9.8's fixed 10 s."""
        if self.profile.configurable_scan_interval:
            return float(self["scanNotActiveBrokerInterval"]) / 1000
        return FIXED_SCAN_INTERVAL_MS / 1000

    @classmethod
    def from_file(cls, path: str | None, overrides: dict[str, Any] | None = None,
                  strict: bool = False, schema: ConfigSchema = NAMESRV_SCHEMA) -> NamesrvConfig:
        """The -c file (if any) under the command line's ``overrides``; ``warnings`` lists its
        unknown keys (``strict`` refuses them).  Without -c, the values UPDATE_NAMESRV_CONFIG
        changed and saved in configStorePath (the data dir's namesrv.properties) are read back, so
        a runtime change survives a restart (Java saves them there but never reads them).
        ``sources`` says where each value not at its default came from; a value out of range
        is refused naming the file it came from."""
        values = dict(overrides or {})
        sources = dict.fromkeys(values, "command line")
        file_keys: dict[str, str] = {}
        kept_in_store: dict[str, str] = {}
        warnings: list[str] = []
        if path:
            file_keys, warnings = read_properties_file(path)
            warnings += check_file_keys(path, file_keys, strict, schema)
            values.setdefault("configStorePath", path)  # Java: -c sets configStorePath
        else:
            store = str(values.get("configStorePath") or schema.by_name["configStorePath"].default)
            if _saved_exists(store):  # a FIFO or a directory there is refused, not skipped
                saved = read_properties(store, "configStorePath: cannot read")
                file_keys = {name: text for name, text in saved.items()
                             if name in schema.by_name and not schema.by_name[name].guarded and name not in values}
                check_file_keys(store, file_keys, schema=schema)
                kept_in_store = {name: text for name, text in saved.items() if name not in file_keys}
                path = store
        for name in file_keys:
            sources.setdefault(name, str(path))
        advertised = os.environ.get(ADVERTISED_ADDRESS_ENV, "").strip()
        if advertised and "advertisedAddress" not in values and "advertisedAddress" not in file_keys:
            values["advertisedAddress"] = advertised
            sources["advertisedAddress"] = f"${ADVERTISED_ADDRESS_ENV}"
        try:
            config = cls(values, file_keys, schema)
        except ConfigError as exc:
            key = str(exc).partition(":")[0]
            if sources.get(key, "command line") != "command line":
                raise ConfigError(f"{sources[key]}: {exc}") from None
            raise
        config.warnings = warnings
        config.sources = sources
        config.kept_in_store = kept_in_store
        return config

    def apply(self, props: dict[str, str]) -> None:
        """UPDATE_NAMESRV_CONFIG: take the new values (the caller refused guarded keys), all or none:
        a value the server cannot run with raises ConfigError and leaves every value as it was.
        The caller then saves ``stored_text()`` and tells ``saved`` how it went."""
        values, extra = dict(self.values), dict(self.extra)
        try:
            self._set(props)
            self._validate()
        except ConfigError:
            self.values.clear()
            self.values.update(values)
            self.extra.clear()
            self.extra.update(extra)
            raise
        self.revision += 1
        for listener in self._subscribers:
            listener()

    def saved(self, error: OSError | None) -> None:
        """How the save of the values applied went: one that failed (a read-only file, a full
        disk) leaves them applied in memory, as Java's Configuration.update does (it logs the
        failed save and answers SUCCESS): the change lasts until the restart, and ``unsaved``
        says so until a later save succeeds."""
        self.unsaved = "" if error is None else str(error)

    def subscribe(self, listener: Callable[[], None]) -> None:
        """``listener()`` hears every update from now on (switches shape answers: the answer cache)."""
        self._subscribers.append(listener)

    def _set(self, props: dict[str, str]) -> None:
        """All values are converted before any is stored: a bad one changes nothing."""
        keys = self.schema.by_name
        known = {name: _coerce(keys[name], text) for name, text in props.items() if name in keys}
        self.values.update(known)
        self.extra.update({name: text for name, text in props.items() if name not in keys})

    def _validate(self) -> None:
        """Refuse values the server cannot run with, naming the key (at start and on 318)."""
        values = self.values
        try:
            profile_named(str(values["compatVersion"]))
        except ValueError as exc:
            raise ConfigError(f"compatVersion: {exc}") from None
        for name, (low, high) in _RANGES.items():
            value = values[name]
            if value < low or (high is not None and value > high):
                allowed = f"{low} to {high}" if high is not None else f"at least {low}"
                raise ConfigError(f"{name}: {value} is out of range ({allowed})")
        if values["headerMaxLength"] > values["frameMaxLength"]:
            raise ConfigError(f"headerMaxLength: {values['headerMaxLength']} exceeds frameMaxLength")
        if values["metricsPort"] and values["metricsPort"] == values["listenPort"]:
            raise ConfigError(f"metricsPort: {values['metricsPort']} is the listenPort")
        for name in ("bindAddress", "metricsBindAddress"):
            if not str(values[name]).strip():
                raise ConfigError(f"{name}: empty")
        if values["tls.server.mode"] not in TLS_MODES:
            raise ConfigError(f"tls.server.mode: {values['tls.server.mode']!r} is not one of {', '.join(TLS_MODES)}")
        if values["aclEnable"] and not values["aclAccountsFile"]:
            raise ConfigError("aclAccountsFile: required when aclEnable=true (a plain_acl.yml)")
        if values["receiveMemoryBudget"] and values["receiveMemoryBudget"] < values["frameMaxLength"]:
            raise ConfigError(f"receiveMemoryBudget: {values['receiveMemoryBudget']} is below frameMaxLength "
                              f"({values['frameMaxLength']}): one peer's biggest request would not fit")
        _check_networks(str(values["aclBrokerNetworks"]))
        _check_nsaddr_list("nsaddrList", str(values["nsaddrList"]))
        _check_nsaddr_list("namesrvAddr", str(values["namesrvAddr"]))
        _check_advertised(str(values["advertisedAddress"]))
        try:
            parse_allowed(str(values["httpAllowedHosts"]))
        except AllowedHostsError as exc:
            raise ConfigError(f"httpAllowedHosts: {exc}") from None
        for check in self.schema.checks:
            check(values)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def blocked_keys(self) -> frozenset[str]:
        """Keys UPDATE_NAMESRV_CONFIG refuses: Java's blacklist, every guarded key, and the keys another
        module keeps (the embedded controller's store path and peers: Java's UPDATE_NAMESRV_CONFIG does
        not reach the controller's config either), so a remote peer changes no ports, threads, queues,
        limits, paths or controller."""
        listed = {k for k in str(self.values["configBlackList"]).split(";") if k}
        schema = self.schema
        return frozenset(ALWAYS_BLOCKED | listed | schema.kept_elsewhere | {k.name for k in schema.keys if k.guarded})

    def listed_keys(self) -> list[str]:
        names = [k.name for k in self.schema.keys if self.profile.name in k.generations or k.name in self.file_keys]
        return names + [n for n in self.extra if n not in names]

    def properties_text(self) -> str:
        """GET_NAMESRV_CONFIG's body: key=value lines, sorted (5.3.3) or hash-ordered (4.9.8);
        secret keys left out, as Java's answer leaves out the TLS settings it keeps elsewhere."""
        return self._text(with_secrets=False)

    def stored_text(self) -> str:
        """What UPDATE_NAMESRV_CONFIG writes to configStorePath: the answer's keys and the secrets
        too (the operator's own file; without them the next start would lose its key password).
        A key of OURS_NOT_JAVAS_DEFAULT at this server's default, set by no one, is written as the
        file had it (Java wrote it) or not at all: Java's mqnamesrv ``-c`` on this file after a swap
        back reads it (MixAll.properties2Object) and would bind where this server did, not where it did."""
        keys = self.schema.by_name
        unset = {name for name in OURS_NOT_JAVAS_DEFAULT if name in keys and name not in self.sources
                 and self.values.get(name) == keys[name].default}
        return self._text(with_secrets=True, kept=self.kept_in_store, unset=unset)

    def _text(self, with_secrets: bool, kept: dict[str, str] | None = None, unset: set[str] | None = None) -> str:
        kept, unset = kept or {}, unset or set()
        names = [n for n in self.listed_keys() if with_secrets or not is_secret(n)]
        names += [n for n in kept if n not in names]
        names = sorted(names) if self.profile.sorted_config_text else java_hash_order(names)
        lines = []
        for name in names:
            value = kept.get(name) if name in unset else self.values.get(name, self.extra.get(name))
            if value is None:
                value = kept.get(name)
            if value is not None:
                lines.append(properties.dump_line(name, _text(value)))
        return "".join(lines)

    def all_keys_text(self) -> str:
        """``-p``: every key we know with its current value (unset ones empty, as rocketmqHome
        without $ROCKETMQ_HOME; a set secret as MASK), each value that did not come from the defaults
        preceded by a comment saying where it came from, and each key that changes nothing here
        (NO_EFFECT) by one saying so and why."""
        shown = masked({k.name: "" if self.values[k.name] is None else _text(self.values[k.name])
                        for k in self.schema.keys})
        lines = []
        for name, value in shown.items():
            if name in NO_EFFECT:
                lines.append(f"# {name}: no effect here ({NO_EFFECT[name]})\n")
            if name in self.sources:
                lines.append(f"# {name} from {self.sources[name]}\n")
            lines.append(properties.dump_line(name, value))
        return "".join(lines)
