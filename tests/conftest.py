"""Without the Spark stack (``tools/setup-env.sh --spark``; ``tools/test.sh`` installs it) the
Spark tests are left out with a line saying so; in CI (CI=true) they are collected and fail.
Fixtures more than one test module uses live here too."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SPARK_MISSING = importlib.util.find_spec("pyspark") is None and not os.environ.get("CI")
collect_ignore = ["spark"] if SPARK_MISSING else []
REPO = Path(__file__).resolve().parents[1]
#: what the wheel is built from
WHEEL_SOURCES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "twisted_namesrv", "spark_analysis",
                 "twisted/plugins/namesrv_plugin.py")
BUILD_TIMEOUT = 120
# a developer's (or CI's) JVM options would add the server's warnings about them (twisted_namesrv/java_opt.py)
# to every start whose stderr a test reads; tests/test_java_opt.py sets its own
for _variable in ("JAVA_OPT", "JAVA_OPTS"):
    os.environ.pop(_variable, None)


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


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(tmp_path))
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built offline from a copy of the sources (no build/ in the checkout);
    once per run for the packaging and systemd tests."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in WHEEL_SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "dropin.cache"))
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(tmp / "dist"), str(src)],
                   check=True, timeout=BUILD_TIMEOUT, env=clean_env(tmp))
    (built,) = (tmp / "dist").glob("twisted_namesrv-*.whl")
    return built
