"""PySpark's pyspark.zip holds no compiled files: every worker compiled what it imported, each run."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from spark_analysis.spark import worker_zip


def test_a_compiled_zip_is_imported_from_its_pycs(tmp_path: Path) -> None:
    path = tmp_path / "pkg.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkgx/__init__.py", "VALUE = 41 + 1\n")
        archive.writestr("pkgx/tests/test_x.py", "assert 1 is 1\n")
        archive.writestr("pkgx/data.txt", "not code")
    worker_zip.MARK, mark = "pkgx/__init__.pyc", worker_zip.MARK
    try:
        assert not worker_zip.compiled(path)
        assert worker_zip.compile_zip(path) == 1
        assert worker_zip.compiled(path)
    finally:
        worker_zip.MARK = mark
    with zipfile.ZipFile(path) as archive:
        assert sorted(archive.namelist()) == ["pkgx/__init__.py", "pkgx/__init__.pyc", "pkgx/data.txt",
                                              "pkgx/tests/test_x.py"]
        assert archive.read("pkgx/data.txt") == b"not code"
    imported = subprocess.run([sys.executable, "-c", "import pkgx; print(pkgx.__file__, pkgx.VALUE)"],
                              env={"PYTHONPATH": str(path)}, capture_output=True, text=True, check=True).stdout
    assert imported.split() == [f"{path}/pkgx/__init__.pyc", "42"]
    assert worker_zip.compile_zip(path) == 0  # once: a module with its pyc is left alone
    assert not list(tmp_path.glob(".*part"))


def test_the_environment_s_worker_zip_is_the_one_spark_puts_first() -> None:
    path = worker_zip.worker_zip()
    assert path.name == "pyspark.zip" and path.is_file()
