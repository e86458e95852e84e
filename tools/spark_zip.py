#!/usr/bin/env python3
"""Build what spark-submit needs to run the capture report on a cluster (YARN, Kubernetes, standalone):

    python tools/spark_zip.py [--out dist/spark_analysis.zip]
    spark-submit --master yarn --py-files dist/spark_analysis.zip dist/spark_analysis_main.py \\
        report hdfs:///captures/ --out hdfs:///reports/today

What the zip holds and what the nodes need installed: spark_analysis/spark/ship.py (which
``python -m spark_analysis report --master spark://...`` uses to ship the same zip itself). The
launcher beside it is the main file: running spark_analysis/__main__.py itself would put the
package directory first on sys.path, where its module names could shadow others.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout's packages, installed or not

from spark_analysis.spark.ship import build_zip  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "spark_analysis.zip")
    args = parser.parse_args(argv)
    out = build_zip(args.out)
    print(f"spark-submit --py-files {out} {out.with_name('spark_analysis_main.py')} report INPUT... --out DIR",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
