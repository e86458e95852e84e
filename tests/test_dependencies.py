"""setup.cfg says what is used: every third-party module the server or the capture analysis imports
is a declared dependency of that side, and every declared dependency is imported (or says why not)."""

from __future__ import annotations

import ast
import configparser
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml", "OpenSSL": "pyopenssl", "zope": "zope.interface"}
#: imported, and installed by a declared distribution as part of it (what we declare instead)
PART_OF = {"pyopenssl": "twisted", "py4j": "pyspark"}  # twisted[tls] is pyOpenSSL; PySpark talks to its JVM by py4j
#: declared but imported by no module of ours, and why
NOT_IMPORTED = {
    "spark": {"pandas": "PySpark's mapInArrow requires it (pandas_udf's require_minimum_pandas_version)"},
}


def requirements(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.add(re.split(r"[\[<>=! ;]", line, maxsplit=1)[0].lower())
    return names


def declared() -> dict[str, set[str]]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    extras = {name: requirements(value) for name, value in parser["options.extras_require"].items()}
    return {"server": requirements(parser["options"]["install_requires"]), **extras}


def imported(package: str) -> set[str]:
    """Third-party distributions a package's modules import, anywhere in them."""
    found = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module
                     else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("twisted_namesrv", "spark_analysis"):
                    distribution = DISTRIBUTIONS.get(top, top).lower()
                    found.add(PART_OF.get(distribution, distribution))
    return found


def test_the_server_imports_only_what_it_declares() -> None:
    deps = declared()
    assert imported("twisted_namesrv") - deps["server"] - deps["tls"] == set()


def test_the_capture_analysis_declares_what_it_imports() -> None:
    """numpy and pyarrow are imported directly; the spark extra used to leave them to pyspark[sql]."""
    deps = declared()
    assert imported("spark_analysis") - deps["server"] - deps["spark"] == set()


def test_every_declared_dependency_is_imported_or_says_why_not() -> None:
    deps = declared()
    server = imported("twisted_namesrv")
    assert deps["server"] - server == set()
    spark = imported("spark_analysis")
    assert deps["spark"] - spark - {"pyspark"} - set(NOT_IMPORTED["spark"]) == set()
    assert "pyspark" in spark
