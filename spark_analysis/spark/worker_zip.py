"""PySpark's Python workers import pyspark from ``SPARK_HOME/python/lib/pyspark.zip``, which ships
without compiled files: zipimport compiles every module a worker imports, in every run (0.65 s of
CPU for a worker's imports here, 0.27 s with them compiled; a small capture's report 6.1-6.5 s
instead of 6.5-7.0 s, three rounds on a quiet machine). ``python -m spark_analysis.spark.worker_zip``
(tools/setup-env.sh --spark runs it) adds each module's compiled form beside its source in that zip,
once.

The compiled files are unchecked-hash pycs (PEP 552): valid as long as the zip is, which pip replaces
whole when PySpark changes, compiled ones gone with it. Another Python reads their magic number as
not its own and compiles the source as before. The zip is replaced atomically; on any error it stays
as it was (a report runs the same, only slower to start). Test modules are left out: no worker
imports them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import warnings
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

#: the member whose compiled form says a zip was compiled
MARK = "pyspark/__init__.pyc"


def worker_zip() -> Path:
    """The zip Spark puts first on its Python workers' path, of this environment's PySpark."""
    import pyspark

    return Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"


def compiled(path: Path) -> bool:
    with zipfile.ZipFile(path) as archive:
        return MARK in archive.namelist()


def compile_zip(path: Path) -> int:
    """Add an unchecked-hash pyc beside each module of the zip at ``path`` (not its tests); the
    number added."""
    added = 0
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(handle)
    try:
        with zipfile.ZipFile(path) as source, zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
            names = set(source.namelist())
            for info in source.infolist():
                data = source.read(info)
                target.writestr(info, data)
                name = info.filename
                if not name.endswith(".py") or "/tests/" in name or f"{name}c" in names:
                    continue
                with warnings.catch_warnings():  # a module's own SyntaxWarnings are not ours to print
                    warnings.simplefilter("ignore")
                    code = compile(data, name, "exec", dont_inherit=True)
                target.writestr(f"{name}c", bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data),
                                                                    checked=False)))
                added += 1
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return added


def main() -> int:
    path = worker_zip()
    if not path.is_file() or compiled(path):
        return 0
    try:
        added = compile_zip(path)
    except (OSError, SyntaxError, zipfile.BadZipFile) as error:
        print(f"worker_zip: {path} left as it was ({error}): reports start as before", file=sys.stderr)
        return 0
    print(f"compiled {added} modules into {path}: Spark's Python workers start without compiling them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
