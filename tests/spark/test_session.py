"""The session the job builds (session.build_session)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def test_the_session_leaves_no_log_configuration_in_the_temp_directory(spark) -> None:
    # the driver JVM's log4j2 file is written for its start only: one per run would pile up
    assert not list(Path(tempfile.gettempdir()).glob(f"spark-analysis-log4j2-{os.getpid()}*"))
