"""``$JAVA_OPT``, what Java's ``bin/runserver.sh`` hands its NameServer's JVM, read only to say what
of it this server does not read and what does the same here.

An operator moving from ``mqnamesrv`` keeps the environment it ran in (a unit's ``Environment=``, a
profile, a container's ``-e``): ``JAVA_OPT="-Duser.home=/data/rocketmq -Dtls.server.mode=enforcing"``.
Java's NameServer reads those system properties (``user.home`` places kvConfig.json and the saved
config, TlsSystemConfig the TLS keys, NettySystemConfig the frame limit); this server is not a JVM
and reads none of them.  Taking them in silence would start it on an empty ``~/namesrv`` (the KV
store, ORDER_TOPIC_CONFIG among it, seemingly gone) or without TLS; so each such property is a
warning naming the option or key that does the same here, after one line saying the variable is not
read.  The rest (heap and GC flags, logging properties) has no counterpart here and is passed over in
silence: a host that sets ``JAVA_OPT`` for every JVM would otherwise be warned at every start.  Nothing
is taken from it: the command line and the ``-c`` file stay the one place a setting comes from.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from .escapes import escaped
from .state.config import MASK, NamesrvConfig, is_secret

#: the variables runserver.sh reads (JAVA_OPT) and the one its users often write instead
VARIABLES = ("JAVA_OPT", "JAVA_OPTS")
#: Java system properties a NameServer's JVM acts on, with what does the same here ({} its value)
_HERE = {
    "com.rocketmq.remoting.frameMaxLength": "frameMaxLength={} in the -c file",
    "tls.server.mode": "--tls-mode {} (or tls.server.mode={} in the -c file)",
    "tls.server.certPath": "--tls-cert {} (or tls.server.certPath in the -c file)",
    "tls.server.keyPath": "--tls-key {} (or tls.server.keyPath in the -c file)",
    "tls.server.keyPassword": "tls.server.keyPassword in the -c file",
    "tls.server.authClient": "tls.server.authClient={} in the -c file",
    "tls.server.need.client.auth": "tls.server.authClient=true in the -c file (for require)",
    "tls.server.trustCertPath": "tls.server.trustCertPath={} in the -c file",
    "tls.config.file": "its tls.server.* keys in the -c file",
    "rocketmq.home.dir": "nothing: rocketmqHome has no effect here (Java reads its logback configuration there)",
    "rocketmq.namesrv.addr": "-n {} for the other NameServers (Java's NameServer does not read it either)",
}


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote: as the shell would have refused it, split at blanks
        return text.split()


def _properties(words: list[str]) -> list[tuple[str, str]]:
    """The ``-Dname=value`` system properties among ``words`` (``-Dname`` alone: an empty value)."""
    found = []
    for word in words:
        if word.startswith("-D") and len(word) > 2:
            name, _, value = word[2:].partition("=")
            found.append((name, value))
    return found


def warnings(environ: Mapping[str, str], config: NamesrvConfig) -> list[str]:
    """What to say of the JVM options in ``environ`` (``VARIABLES``), given the running ``config``:
    ``user.home`` places Java's KV store only while kvConfigPath is at its default, so it needs no
    line when the ``-c`` file or the command line sets kvConfigPath (Java reads the file's too), nor
    when its ``namesrv`` directory already is where the KV store is."""
    kv_config_path = str(config["kvConfigPath"])
    placed = "kvConfigPath" in config.sources
    said = []
    for variable in VARIABLES:
        text = environ.get(variable, "").strip()
        if not text:
            continue
        named = []
        for name, value in _properties(_words(text)):
            shown = MASK if is_secret(name) or name.endswith("keyPassword") else escaped(value)
            if name == "user.home":
                data_dir = f"{value.rstrip('/')}/namesrv"
                if not placed and kv_config_path != f"{data_dir}/kvConfig.json":
                    named.append(f"${variable}: -Duser.home={shown}: Java keeps kvConfig.json and namesrv.properties "
                                f"in {escaped(data_dir)}; here: --data-dir {escaped(data_dir)}")
            elif name in _HERE:
                named.append(f"${variable}: -D{name}={shown}: here: {_HERE[name].format(shown, shown)}")
        if named:  # (heap and GC flags alone: nothing to say)
            said += [f"${variable} is set: options for Java's JVM, not read by this server "
                     "(the command line and the -c file are read)", *named]
    return said
