"""Modules Twisted imports at module level for parts this server never runs, made ready to load at
their first use instead (``importlib.util.LazyLoader``).

``twisted.python.compat``, which nearly every Twisted module imports, binds ``http.cookiejar`` (as
its deprecated ``cookielib``, for twisted.web's cookie agent). Loading it runs ``urllib.request``,
``http.client``, the ``email`` package, ``tempfile``, ``shutil`` and the compression modules they
import: 2.2 MiB of every server process's RSS (docs/benchmarks.md), and no NameServer request,
page or store touches a cookie.

``twisted.internet.posixbase``, under every POSIX reactor, imports ``twisted.internet.udp`` and
``twisted.internet.unix`` (with ``twisted.internet._multicast`` and ``twisted.python.sendmsg``)
for ``listenUDP``, ``listenMulticast``, ``listenUNIX``, ``connectUNIX`` and the adopt methods on
those families: a NameServer listens on TCP alone (sd_notify's datagram is a plain socket,
sdnotify.py), and their classes are 0.2 MB of the heap (tracemalloc).

Entered lazily, each is a module object whose code runs at the first attribute read of it (by
anyone: it works as before, only later; ``reactor.listenUDP`` loads ``udp`` as it reads
``udp.Port``); until then none of the modules it imports is loaded.

``defer_unused()`` must run before those who import them are: the process's entry (``__main__``,
the ``twisted-namesrv`` command) calls it first. Under ``twistd`` Twisted is loaded before any of
this package, and they are loaded as they always were. A module already loaded is left as it is.
"""

from __future__ import annotations

import importlib.util
import sys

#: what Twisted imports and a default server never uses (see above); each is imported by name from
#: its package (``from http import cookiejar``, ``from twisted.internet import udp``), which finds
#: the entry on the package without loading it
UNUSED = ("http.cookiejar", "twisted.internet.udp", "twisted.internet.unix")


def defer_unused(names: tuple[str, ...] = UNUSED) -> list[str]:
    """Each of ``names`` not loaded yet entered in ``sys.modules`` (and on its package) as a module
    loaded at its first use; the names so entered."""
    entered = []
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)  # (imports its package: ``http``, ``twisted.internet``: a few lines)
        if spec is None or spec.loader is None:
            continue
        spec.loader = importlib.util.LazyLoader(spec.loader)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        package, _, attribute = name.rpartition(".")
        if package:
            # ``from http import cookiejar`` then finds it on the package: the import system's own
            # look-up would read the module's __spec__, and any read of a lazy module loads it
            setattr(sys.modules[package], attribute, module)
        entered.append(name)
    return entered
