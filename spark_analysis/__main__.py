"""``python -m spark_analysis report INPUT... --out DIR``; also the main file for spark-submit
(``spark-submit --py-files dist/spark_analysis.zip spark_analysis/__main__.py report ...``)."""

from __future__ import annotations

import argparse

from spark_analysis.capture.reassembly import DEFAULT_SERVER_PORT


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from spark_analysis.job import analyse, build_session  # after --help: importing pyspark is slow

    spark = build_session(args.master, ui=args.ui)
    try:
        split_size = int(args.split_mib * (1 << 20)) if args.split_mib else None
        analyse(spark, args.inputs, args.out, args.port, split_size)
    finally:
        spark.stop()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spark_analysis",
                                     description="Explain NameServer traffic from packet captures with Spark.")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="decode captures into frames/, calls/, registrations/, "
                                                "brokers.csv and report.html")
    report.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="pcap/pcapng files, directories, globs, or Spark paths (hdfs://, s3a://)")
    report.add_argument("--out", required=True, metavar="DIR", help="output directory (local or a Spark path)")
    report.add_argument("--master", help="Spark master (default: local[*], or what spark-submit was given)")
    report.add_argument("--port", type=int, default=DEFAULT_SERVER_PORT, help="NameServer port (default 9876)")
    report.add_argument("--split-mib", type=float, help="bytes of capture per task (default: by input size)")
    report.add_argument("--ui", action="store_true", help="start Spark's web UI (off by default for local runs)")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
