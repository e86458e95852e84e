"""``python -m spark_analysis report INPUT... --out DIR``; also the main file for spark-submit
(``spark-submit --py-files dist/spark_analysis.zip spark_analysis/__main__.py report ...``).
``python -m spark_analysis prepare CAPTURE...`` records the classes Spark's JVM loads, once, for
local reports to start in about half the time (session.class_archive).

Arguments are checked before the JVM starts: a missing input, an output that would be
overwritten or an option Spark would refuse is one line and exit status 2, not a traceback after
seconds of start-up; a JVM that does not start is what it said and one line, exit status 4."""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import sys
import tempfile

#: what the spark extra installs that the command needs (setup.cfg)
_SPARK_EXTRA = ("numpy", "pyarrow", "pyspark", "plotly")
if _missing := [name for name in _SPARK_EXTRA if importlib.util.find_spec(name) is None]:
    sys.exit(f"python -m spark_analysis: error: {', '.join(_missing)} not installed: the capture report needs "
             f"the spark extra (tools/setup-env.sh --spark, or pip install '.[spark]')")

from spark_analysis.analysis.findings import NO_NAMESERVER_FOUND  # noqa: E402
from spark_analysis.capture.inputs import (  # noqa: E402
    READ_ANYWAY,
    expand_local,
    is_local,
    local_path,
    shown_name,
    special_kind,
)

#: exit status when no input is a capture (2: the command line was wrong)
NO_CAPTURE = 3
#: exit status when the captures hold no NameServer traffic (no endpoint answered a NameServer's requests)
NO_NAMESERVER = 6
#: exit status when Spark's JVM does not start (Java missing or failing)
JVM_FAILED = 4
#: exit status when a remote input or output cannot be reached or read (a missing connector, a host down)
REMOTE_FAILED = 5
#: exit status when the output cannot be written (a full disk, a quota, no permission): what the run
#: wrote there is incomplete, without summary.json
OUTPUT_FAILED = 7
#: exit status when a local capture shrank while it was read (rewritten in place: a tcpdump -W ring)
INPUT_SHRANK = 8
#: seconds between the lines on tasks done while a Spark job runs, when stderr is not a terminal
TASKS_EVERY_S = 30.0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "prepare":
        return prepare(parser, args.inputs)
    made = is_local(args.out) and not os.path.exists(local_path(args.out))
    problem = check_arguments(args.inputs, args.out, args.overwrite)
    if problem:
        parser.exit(2, f"{parser.prog}: error: {problem}\n")
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkRuntimeError  # after the checks: importing pyspark is slow

    from spark_analysis.capture.inputs import InputShrank
    from spark_analysis.spark import remote, session
    from spark_analysis.spark.job import analyse, output_problem

    conf = dict(args.conf)
    if args.driver_memory:
        conf["spark.driver.memory"] = args.driver_memory
    try:
        spark = session.build_session(args.master, ui=args.ui, log_level=args.spark_log, conf=conf)
    except PySparkRuntimeError as error:
        _forget_output(args.out, made)
        return _jvm_did_not_start(parser, error)
    if args.master and not args.master.startswith("local"):
        remote.ship(spark)  # what spark-submit's --py-files would give the executors
    starting = session.start_workers(spark)
    try:
        split_size = int(args.split_mib * (1 << 20)) if args.split_mib else None
        counts = analyse(spark, args.inputs, args.out, tuple(args.port), split_size,
                         tasks_every=None if os.isatty(2) else TASKS_EVERY_S)  # on a terminal, Spark's bar
    except InputShrank as error:
        _forget_output(args.out, made)
        print(f"{parser.prog}: error: {error} (the report in {args.out} is incomplete: no summary.json)",
              file=sys.stderr)
        return INPUT_SHRANK
    except Py4JJavaError as error:
        said = remote.problem(spark, error)
        if said is None:
            raise
        _forget_output(args.out, made)
        print(f"{parser.prog}: error: {said}", file=sys.stderr)
        return REMOTE_FAILED
    except BaseException as error:
        _forget_output(args.out, made)
        cannot = output_problem(error) if isinstance(error, Exception) else None
        if cannot is None:
            raise
        print(f"{parser.prog}: error: {cannot} (the report in {args.out} is incomplete: no summary.json)",
              file=sys.stderr)
        return OUTPUT_FAILED
    finally:
        if starting:
            starting.join()
        session.stop(spark)
    files = counts["summary"]["inputs"]["files"]
    if not any(f["problem"] in (None, *READ_ANYWAY) and f["records"] for f in files):
        print(f"{parser.prog}: error: no input is a capture with records (see the findings)", file=sys.stderr)
        return NO_CAPTURE
    if not counts["summary"]["nameservers"]:
        print(f"{parser.prog}: error: {NO_NAMESERVER_FOUND}"
              f"{' on port ' + ', '.join(map(str, args.port)) if args.port else ''}: see the findings",
              file=sys.stderr)
        return NO_NAMESERVER
    return 0


def _forget_output(out: str, made: bool) -> None:
    """A local output directory this run made and left empty is removed: a failed run leaves none."""
    if made:
        try:
            os.rmdir(local_path(out))
        except OSError:
            pass  # not empty: something was written there


def prepare(parser: argparse.ArgumentParser, inputs: list[str]) -> int:
    """Record the classes Spark's driver JVM loads in a report over ``inputs``, for later local runs
    to map (session.class_archive: about 160 MB; their start then takes about half the time)."""
    problem = check_arguments(inputs, None, False)
    if problem:
        parser.exit(2, f"{parser.prog}: error: {problem}\n")
    from pyspark.errors import PySparkRuntimeError

    from spark_analysis.spark import session
    from spark_analysis.spark.job import analyse

    archive = session.class_archive()
    if archive is None:
        print(f"{parser.prog}: error: no Java found (JAVA_HOME, or java on the PATH); Spark needs Java 17 or later",
              file=sys.stderr)
        return JVM_FAILED
    print(f"recording the classes Spark's JVM loads in a report over {' '.join(inputs)}, into {archive}")
    with tempfile.TemporaryDirectory(prefix="spark-analysis-prepare-") as out:
        try:
            session.record_classes(archive, lambda spark: analyse(spark, inputs, out, log=lambda line: None))
        except PySparkRuntimeError as error:
            return _jvm_did_not_start(parser, error)
    print(f"wrote {archive} ({os.path.getsize(archive) / (1 << 20):,.0f} MiB): local reports start from it")
    return 0


def _jvm_did_not_start(parser: argparse.ArgumentParser, error: Exception) -> int:
    """One line and JVM_FAILED where the JVM exited as it started, having said why above."""
    if "JAVA_GATEWAY_EXITED" not in str(error):
        raise error
    print(f"{parser.prog}: error: Spark's JVM did not start; what it said is above (it needs Java 17 or "
          f"later, on the PATH or in JAVA_HOME)", file=sys.stderr)
    return JVM_FAILED


def check_arguments(inputs: list[str], out: str | None, overwrite: bool) -> str | None:
    """What is wrong with the local inputs and output (``out``, where there is one), if anything
    (other filesystems: Spark says); a local output directory is made here."""
    for given in inputs:
        if is_local(given):
            path = local_path(given)
            skipped: list[str] = []
            if not expand_local(path, skipped):
                given = shown_name(given)  # said on a terminal: a name's ESC or newline shown, not obeyed
                if not glob.has_magic(path) and os.path.islink(path) and not os.path.exists(path):
                    return f"{given} is a symbolic link to {shown_name(os.readlink(path))}, which does not exist"
                if not (glob.glob(path) if glob.has_magic(path) else os.path.exists(path)):
                    return f"no such file or directory: {given}"
                kind = special_kind(path)
                if kind:
                    return (f"{given} is {kind}, not a file: the report reads captures by byte ranges (save it to a "
                            "file first; a .gz, .bz2 or .xz capture is read as it is)")
                if os.path.isfile(path) and skipped:
                    return shown_name(skipped[0])  # "PATH (cannot be read: Permission denied)"
                return (f"no files in {given} (names starting with . or _, and earlier reports' outputs, are skipped"
                        + "".join(f"; {shown_name(why)}" for why in skipped[:3])
                        + (f"; {len(skipped) - 3} more skipped" if len(skipped) > 3 else "") + ")")
    if out is None or not is_local(out):
        return None
    path = local_path(out)
    if not overwrite and (os.path.isfile(path) or (os.path.isdir(path) and os.listdir(path))):
        return f"output {out} exists and is not empty (--overwrite replaces what the job writes there)"
    try:  # made now, where the job would fail after seconds of start-up
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        return f"cannot make the output directory {out}: {error.strerror}"
    return None


#: the levels Spark's log takes (SparkContext.setLogLevel)
_LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
#: what spark-submit takes as a master (Spark 4: local..., spark://, k8s://, yarn)
_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|(spark|k8s)://\S+")


def spark_master(value: str) -> str:
    """--master, checked before the JVM starts: a master Spark refuses is a Java stack trace."""
    if not _MASTER.fullmatch(value):
        raise argparse.ArgumentTypeError(f"not a Spark master: {value!r} (local, local[N], local[*], "
                                         f"spark://HOST:PORT, yarn, k8s://URL)")
    return value


def _memory(value: str) -> str:
    """A JVM memory size as Spark takes it (512m, 2g, ...)."""
    if not re.fullmatch(r"\d+[kmgt]?b?", value.lower()):
        raise argparse.ArgumentTypeError(f"not a memory size: {value!r} (e.g. 512m, 2g)")
    return value


def _conf(value: str) -> tuple[str, str]:
    key, equals, setting = value.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {value!r}")
    return key.strip(), setting


def _port(value: str) -> int:
    return _number(int, value, 1, 65535)


def _mib(value: str) -> float:
    return _number(float, value, 0.001, 1 << 20)


def _number(kind: type, value: str, least: float, most: float) -> float:
    """An option's number, within [least, most], or argparse's one-line error."""
    try:
        number = kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not least <= number <= most:
        raise argparse.ArgumentTypeError(f"{value} is out of range ({least} to {most})")
    return number


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spark_analysis",
                                     description="Explain NameServer traffic from packet captures with Spark.")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="decode captures into frames/, calls/, registrations/, "
                                                "brokers.csv, summary.json and report.html")
    report.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="pcap/pcapng files, directories, globs, or Spark paths (hdfs://, s3a://)")
    report.add_argument("--out", required=True, metavar="DIR", help="output directory (local or a Spark path)")
    report.add_argument("--overwrite", action="store_true", help="write into an existing non-empty --out")
    report.add_argument("--master", type=spark_master,
                        help="Spark master (default: local[*], or what spark-submit was given)")
    report.add_argument("--port", type=_port, action="append", default=[],
                        help="only traffic to or from this port (repeatable; default: every port, the NameServers "
                             "found from their traffic)")
    report.add_argument("--split-mib", type=_mib, help="MiB of capture per task (default: by input size)")
    report.add_argument("--spark-log", default="ERROR", metavar="LEVEL", type=str.upper, choices=_LOG_LEVELS,
                        help="Spark's own log level (default ERROR; WARN or INFO to see more)")
    report.add_argument("--ui", action="store_true", help="start Spark's web UI (off by default for local runs)")
    report.add_argument("--driver-memory", type=_memory, metavar="SIZE",
                        help="the driver JVM's heap (Spark's spark.driver.memory, e.g. 2g; default 1g)")
    report.add_argument("--conf", type=_conf, action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting, as spark-submit's --conf (repeatable), e.g. "
                             "spark.jars.packages=org.apache.hadoop:hadoop-aws:3.4.1")
    prepare = commands.add_parser("prepare", help="record the classes Spark's JVM loads in a report over INPUT, "
                                                  "for local reports to start in half the time (about 160 MB)")
    prepare.add_argument("inputs", nargs="+", metavar="INPUT", help="a small capture or two (local files)")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
