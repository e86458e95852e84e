#!/usr/bin/env python3
"""A scratch checkout with the pure layers compiled by mypyc: what compiling them would save, counted.

A benchmark's helper, not the build.  Makes a ``git worktree`` of this checkout's HEAD in ``DIR``
and compiles its modules named by ``--modules`` there, in place, with mypyc (it ships with mypy,
in the test environment): the extension modules sit beside the ``.py`` files and are imported
first.  Then count the two trees as the benchmarks do, e.g.::

    .venv/bin/python tools/bench/compiled.py ../compiled
    PYTHONHASHSEED=0 .venv/bin/python tools/bench/instructions.py --fewer 200 --more 600
    PYTHONHASHSEED=0 .venv/bin/python tools/bench/instructions.py --fewer 200 --more 600 --tree ../compiled
    cd ../compiled && PYTHONPATH=. PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no \\
        --cachegrind-out-file=/dev/null ../twisted-namesrv/.venv/bin/python tools/bench/turns.py \\
        --step brokers-5000 --brokers 500 --first-only --log text

``--modules pure`` (the default) is every strictly typed module of the wire codec, the bodies
and the state (pyproject.toml's strict list) but two whose exceptions subclass OSError, which
mypyc cannot compile as native classes; ``--modules handler`` adds the handler's path above them
that type-checks as one program with them (``answer_cache``, ``processor``, ``dispatch``,
``events``).  docs/benchmarks.md ("Compiled with mypyc") has what it measured.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the strict layers' packages (pyproject.toml): a mypyc build checks its modules as mypy --strict would
PURE_PACKAGES = ("remoting", "bodies", "state")
#: exceptions subclassing OSError (FileTooBig, a snapshot's errors): "Inheriting from most builtin types
#: is unimplemented" for a native class; not on any registration's path
NOT_COMPILED = ("state/files.py", "state/store.py")
#: the handler's path above the pure layers that type-checks with them as one program; server.py and
#: logs.py do not (Twisted's protocol and observer types: 58 errors), reactor.py is not on the path
HANDLER = ("answer_cache.py", "processor.py", "dispatch.py", "events.py")


def modules(which: str, tree: Path) -> list[str]:
    """The files to compile, relative to ``tree``."""
    root = tree / "twisted_namesrv"
    found = [str(p.relative_to(tree)) for package in PURE_PACKAGES for p in sorted((root / package).glob("*.py"))
             if str(p.relative_to(root)) not in NOT_COMPILED]
    if which == "handler":
        found += [f"twisted_namesrv/{name}" for name in HANDLER]
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="the scratch checkout to make (a git worktree of HEAD)")
    p.add_argument("--modules", choices=("pure", "handler"), default="pure")
    a = p.parse_args()
    tree = a.dir.resolve()
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), "HEAD"], cwd=REPO, check=True)
    # the project's mypy settings but the unused-section warning, which mypyc takes for a failure
    config = tree / "build" / "mypyc.toml"
    config.parent.mkdir(exist_ok=True)
    config.write_text(re.sub(r"(?m)^warn_unused_configs = true$", "warn_unused_configs = false",
                             (tree / "pyproject.toml").read_text()))
    mypyc = Path(sys.executable).with_name("mypyc")
    subprocess.run([str(mypyc), "--config-file", str(config), *modules(a.modules, tree)], cwd=tree, check=True)
    built = sorted(tree.glob("twisted_namesrv/**/*.so"))
    print(f"{tree}: {len(built)} modules compiled")


if __name__ == "__main__":
    main()
