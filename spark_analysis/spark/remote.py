"""Running on a cluster, and inputs and outputs on other filesystems, from the command line.

``ship``: a non-local master given to ``python -m spark_analysis report --master ...`` gets the
project's zip (ship.py) as spark-submit's ``--py-files`` would give it: without it every task
failed on its first import. ``problem``: what a Java failure reaching a remote path means, in one
line: a filesystem whose connector is not on Spark's class path (s3a:// without hadoop-aws: which
package to add), or a host that does not answer; None for any other failure (its trace is shown).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from spark_analysis.spark.ship import build_zip

#: URI scheme -> (the connector's artifact, its Maven coordinates without version, versioned as Hadoop)
CONNECTORS = {
    "s3a": ("hadoop-aws", "org.apache.hadoop:hadoop-aws"),
    "abfs": ("hadoop-azure", "org.apache.hadoop:hadoop-azure"),
    "abfss": ("hadoop-azure", "org.apache.hadoop:hadoop-azure"),
    "wasb": ("hadoop-azure", "org.apache.hadoop:hadoop-azure"),
    "gs": ("gcs-connector", "com.google.cloud.bigdataoss:gcs-connector"),
}
#: filesystem classes by the scheme they serve, as Hadoop names them in a ClassNotFoundException
_CLASS_SCHEMES = {"S3AFileSystem": "s3a", "AzureBlobFileSystem": "abfs", "SecureAzureBlobFileSystem": "abfss",
                  "NativeAzureFileSystem": "wasb", "GoogleHadoopFileSystem": "gs"}
_HOST = re.compile(r" to ([\w.-]+:\d+) failed")  # Hadoop's "Call From a/1.2.3.4 to host:port failed on ..."
_UNREACHABLE = ("java.net.ConnectException", "java.net.UnknownHostException", "java.net.NoRouteToHostException",
                "java.net.SocketTimeoutException", "org.apache.hadoop.net.ConnectTimeoutException")


def ship(spark: SparkSession) -> Path:
    """Build the zip in a temporary directory and add it to the job's Python path on every executor."""
    path = build_zip(Path(tempfile.mkdtemp(prefix="spark-analysis-ship-")) / "spark_analysis.zip")
    spark.sparkContext.addPyFile(str(path))
    return path


def problem(spark: SparkSession, error: Exception) -> str | None:
    """One line saying why a remote path failed, if the Java exception (or a cause) says so."""
    causes = []
    cause = getattr(error, "java_exception", None)
    while cause is not None and len(causes) < 20:
        causes.append(str(cause.toString()))
        cause = cause.getCause()
    for text in causes:
        scheme = _missing_scheme(text)
        if scheme is not None:
            return _connector_hint(spark, scheme)
    for text in reversed(causes):  # the deepest says most plainly
        if text.startswith(_UNREACHABLE):
            host = next((found.group(1) for found in map(_HOST.search, causes) if found), None)
            where = f"{host} (a remote input or output)" if host else "a remote input or output"
            return f"cannot reach {where}: {text.splitlines()[0]}"
    return None


def _missing_scheme(text: str) -> str | None:
    found = re.search(r'No FileSystem for scheme "?([\w+.-]+)"?', text)
    if found:
        return found.group(1)
    found = re.search(r"ClassNotFoundException: Class [\w.]+\.(\w+) not found", text)
    if found:
        return _CLASS_SCHEMES.get(found.group(1), found.group(1))
    return None


def _connector_hint(spark: SparkSession, scheme: str) -> str:
    artifact, coordinates = CONNECTORS.get(scheme, (None, None))
    if artifact is None:
        return f"no Hadoop filesystem for {scheme}:// on Spark's class path"
    version = _hadoop_version(spark)
    package = f"{coordinates}:{version}" if coordinates.startswith("org.apache.hadoop") and version else coordinates
    return (f"{scheme}:// needs the {artifact} connector on Spark's class path: add "
            f"--conf spark.jars.packages={package} (spark-submit: --packages {package}), or its jar with --jars")


def _hadoop_version(spark: SparkSession) -> str | None:
    try:
        return str(spark.sparkContext._jvm.org.apache.hadoop.util.VersionInfo.getVersion())  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - only a hint's detail
        return None
