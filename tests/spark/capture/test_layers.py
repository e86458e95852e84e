"""The layers a reader relies on: the capture reader stands without Spark, and the Spark decoder
uses the codec and bodies without the server's dispatch layer or changing its globals."""

from __future__ import annotations

import subprocess
import sys

LOADED = "import sys; import {modules}; print(' '.join(sorted(sys.modules)))"


def loaded_by(*modules: str) -> set[str]:
    """The modules a fresh interpreter holds after importing ``modules``."""
    out = subprocess.run([sys.executable, "-c", LOADED.format(modules=", ".join(modules))], check=True,
                         capture_output=True, text=True).stdout
    return set(out.split())


def test_the_capture_reader_imports_no_spark() -> None:
    loaded = loaded_by("spark_analysis.capture.conversation", "spark_analysis.capture.records")
    assert "spark_analysis.capture.reassembly" in loaded
    assert not {name for name in loaded if name.split(".")[0] in ("pyspark", "twisted")}


def test_the_spark_decoder_imports_no_dispatch_and_keeps_the_servers_templates() -> None:
    loaded = loaded_by("spark_analysis.decode.rows", "spark_analysis.spark.job")
    assert "twisted_namesrv.remoting.values" in loaded
    assert not loaded & {"twisted_namesrv.processor", "twisted_namesrv.server", "twisted_namesrv.replies"}
    from spark_analysis.decode import rows  # noqa: F401 - imported here too: no global of the server changes
    from twisted_namesrv.remoting import header
    assert not [name for name, value in vars(header).items() if isinstance(value, header.HeaderTemplates)]
