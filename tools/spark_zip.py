#!/usr/bin/env python3
"""Build what spark-submit needs to run the capture report on a cluster (YARN, Kubernetes, standalone):

    python tools/spark_zip.py [--out dist/spark_analysis.zip]
    spark-submit --master yarn --py-files dist/spark_analysis.zip dist/spark_analysis_main.py \\
        report hdfs:///captures/ --out hdfs:///reports/today

The zip holds spark_analysis and twisted_namesrv (the one wire codec) and the pure-Python
dependencies the executors import (construct, crcmod: without its C extension crcmod computes
CRCs in Python, slower; install crcmod on the executors to avoid that). The launcher beside it
is the main file: running spark_analysis/__main__.py itself would put the package directory first
on sys.path, where its module names could shadow others. Driver and executors also need PySpark's
sql extra (pyarrow, pandas, numpy) and msgspec (registration bodies): compiled, so installed, not
zipped; the driver also plotly (it draws the report's plots).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("spark_analysis", "twisted_namesrv", "construct", "crcmod")
LAUNCHER = "from spark_analysis.__main__ import main\n\nraise SystemExit(main())\n"


def package_dir(name: str) -> Path:
    local = REPO / name
    return local if local.is_dir() else Path(importlib.import_module(name).__file__).parent


def build(out: Path) -> Path:
    """Write the zip and the launcher beside it; return the launcher's path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in PACKAGES:
            root = package_dir(name)
            for source in sorted(root.rglob("*.py")):
                if "__pycache__" not in source.parts:
                    archive.write(source, Path(name, source.relative_to(root)).as_posix())
    launcher = out.with_name("spark_analysis_main.py")
    launcher.write_text(LAUNCHER)
    return launcher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "spark_analysis.zip")
    args = parser.parse_args(argv)
    launcher = build(args.out)
    print(f"spark-submit --py-files {args.out} {launcher} report INPUT... --out DIR", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
