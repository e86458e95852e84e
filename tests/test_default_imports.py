"""What a default server (no metricsPort, no controller, no TLS) imports: none of the modules only
an option's parts use, so the memory a default server holds at rest is not theirs (docs/benchmarks.md,
issue 47's RSS). Each is imported where the composition root (service.py) wires its part; what Twisted
imports for parts no NameServer runs loads at its first use (unused_imports.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: modules only an option's parts import: the peers view and its blocking admin client (metricsPort),
#: the HTTP side (metricsPort), the controller's service (enableControllerInNamesrv)
#: what Twisted imports at module level for a part no NameServer runs (``http.cookiejar``, for
#: twisted.web's cookie agent), which loads at its first use instead (unused_imports.py): what its
#: loading ran (``email``'s parts besides, unless the ``tls`` extra's cryptography imports them)
DEFERRED = ("urllib.request", "http.client", "email.parser", "email.feedparser", "email.message")

#: what Twisted's POSIX reactor imports for datagram and unix-socket ports a NameServer never opens,
#: which load at their first use instead (unused_imports.py): entered, not run, and what they import
LAZY = ("twisted.internet.udp", "twisted.internet.unix")
LAZY_IMPORT = ("twisted.internet._multicast", "twisted.python.sendmsg")

OPTIONAL = ("twisted_namesrv.peers", "twisted_namesrv.admin.client", "twisted_namesrv.admin.compare",
            "twisted_namesrv.web", "twisted.web", "prometheus_client", "twisted_namesrv.controller.service")

STARTED = """
import json, sys, tempfile
import twisted_namesrv.__main__  # the process's entry, as the twisted-namesrv command imports it first
from pathlib import Path
from twisted.internet import reactor
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import NamesrvConfig
data = Path(tempfile.mkdtemp())
config = NamesrvConfig({"listenPort": 0, "bindAddress": "127.0.0.1", "kvConfigPath": str(data / "kv.json"),
                        "configStorePath": str(data / "namesrv.properties")}, schema=SERVER_SCHEMA)
service = NamesrvService.from_config(config, reactor)
service.startService()
service.stopService()
print(json.dumps(sorted(sys.modules)))
"""


def test_a_default_server_imports_no_optional_part(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", STARTED], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "twisted_namesrv.service" in loaded and "twisted_namesrv.state.routes" in loaded
    assert sorted(name for name in loaded if any(name == n or name.startswith(n + ".") for n in OPTIONAL)) == []


def test_what_twisted_imports_for_cookies_is_not_loaded_until_used() -> None:
    code = STARTED.replace("print(json.dumps(sorted(sys.modules)))", """
loaded = sorted(sys.modules)
import http.cookiejar
print(json.dumps([loaded, http.cookiejar.CookieJar().__class__.__module__, "urllib.request" in sys.modules]))
""")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    loaded, jar_module, loaded_at_use = json.loads(done.stdout.splitlines()[-1])
    assert "twisted.python.compat" in loaded and "twisted_namesrv.service" in loaded
    assert sorted(name for name in loaded if any(name == n or name.startswith(n + ".") for n in DEFERRED)) == []
    assert (jar_module, loaded_at_use) == ("http.cookiejar", True)  # used, it is the module it always was


def test_twisteds_datagram_and_unix_socket_ports_are_not_loaded_until_used(tmp_path: Path) -> None:
    code = STARTED.replace("print(json.dumps(sorted(sys.modules)))", f"""
def ran(name):  # the module's own dictionary, read past a lazy module's trigger: its code has run
    return "Port" in object.__getattribute__(sys.modules[name], "__dict__")
unloaded = [[name, ran(name)] for name in {LAZY!r}] + [[name, name in sys.modules] for name in {LAZY_IMPORT!r}]
from twisted.internet import protocol
udp_port = reactor.listenUDP(0, protocol.DatagramProtocol(), interface="127.0.0.1")
unix_port = reactor.listenUNIX({str(tmp_path / "s")!r}, protocol.Factory.forProtocol(protocol.Protocol))
used = [type(udp_port).__module__, type(unix_port).__module__, udp_port.getHost().port > 0,
        unix_port.getHost().name.decode()]
udp_port.stopListening(); unix_port.stopListening()
print(json.dumps([unloaded, used]))
""")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    unloaded, used = json.loads(done.stdout.splitlines()[-1])
    assert unloaded == [[name, False] for name in LAZY + LAZY_IMPORT]
    assert used == ["twisted.internet.udp", "twisted.internet.unix", True, str(tmp_path / "s")]  # used, they work
