"""What executors need of this project, as one zip: spark_analysis and twisted_namesrv (the one wire
codec; its CRC is zlib's), and construct, the one pure-Python package they need (it declares and
parses pcapng's cold blocks: capture/pcapng.py; it depends on nothing), zipped as they are.

tools/spark_zip.py writes it for spark-submit; ``python -m spark_analysis report --master
spark://...`` (or yarn, k8s) writes it to a temporary directory and ships it with the job
(SparkContext.addPyFile) before any task runs, as spark-submit's ``--py-files`` would. Driver and
executors also need PySpark's sql extra (pyarrow, pandas, numpy) and msgspec (registration
bodies): compiled, so installed, not zipped; the driver also plotly (it draws the report's plots).
"""

from __future__ import annotations

import importlib
import zipfile
from pathlib import Path

PACKAGES = ("spark_analysis", "twisted_namesrv", "construct")
#: the main file beside the zip for spark-submit: running spark_analysis/__main__.py itself would put
#: the package directory first on sys.path, where its module names could shadow others
LAUNCHER = "from spark_analysis.__main__ import main\n\nraise SystemExit(main())\n"


def package_dir(name: str) -> Path:
    module = importlib.import_module(name)
    return Path(module.__file__ or "").parent


def build_zip(out: Path) -> Path:
    """Write the zip (the Python sources of PACKAGES) and the launcher beside it; return the zip."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in PACKAGES:
            root = package_dir(name)
            for source in sorted(root.rglob("*.py")):
                if "__pycache__" not in source.parts:
                    archive.write(source, Path(name, source.relative_to(root)).as_posix())
    out.with_name("spark_analysis_main.py").write_text(LAUNCHER)
    return out
