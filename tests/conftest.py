"""Without the Spark stack (``tools/setup-env.sh --spark``; ``tools/test.sh`` installs it) the
Spark tests are left out with a line saying so; in CI (CI=true) they are collected and fail.
Fixtures more than one test module uses live here too."""

from __future__ import annotations

import importlib.util
import os
import socket

import pytest

SPARK_MISSING = importlib.util.find_spec("pyspark") is None and not os.environ.get("CI")
collect_ignore = ["spark"] if SPARK_MISSING else []


def pytest_report_header() -> list[str]:
    if SPARK_MISSING:
        return ["tests/spark left out: PySpark is not installed (tools/setup-env.sh --spark, or tools/test.sh)"]
    return []


@pytest.fixture
def taken_port():
    """A port on 127.0.0.1 that something already listens on (a start that must fail to bind)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]
