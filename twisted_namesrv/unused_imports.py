"""A standard-library module Twisted imports at module level for a part this server never runs,
made ready to load at its first use instead (``importlib.util.LazyLoader``).

``twisted.python.compat``, which nearly every Twisted module imports, binds ``http.cookiejar`` (as
its deprecated ``cookielib``, for twisted.web's cookie agent). Loading it runs ``urllib.request``,
``http.client``, the ``email`` package, ``tempfile``, ``shutil`` and the compression modules they
import: 2.2 MiB of every server process's RSS (docs/benchmarks.md), and no NameServer request,
page or store touches a cookie. Entered lazily, ``http.cookiejar`` is a module object whose code
runs at the first attribute read of it (by anyone: it works as before, only later); until then
none of those modules is loaded.

``defer_unused()`` must run before Twisted is imported: the process's entry (``__main__``, the
``twisted-namesrv`` command) calls it first. Under ``twistd`` Twisted is loaded before any of this
package, and the module is loaded as it always was. A module already loaded is left as it is.
"""

from __future__ import annotations

import importlib.util
import sys

#: what Twisted imports and a default server never uses (see above)
UNUSED = ("http.cookiejar",)


def defer_unused(names: tuple[str, ...] = UNUSED) -> list[str]:
    """Each of ``names`` not loaded yet entered in ``sys.modules`` (and on its package) as a module
    loaded at its first use; the names so entered."""
    entered = []
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)  # (imports its package: ``http``, a few lines)
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
