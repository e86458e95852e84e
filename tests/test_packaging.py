"""`twistd namesrv` is found however the package is installed.  Twisted finds plugins in the
twisted/plugins directory of every sys.path entry: a wheel (and `pip install .`) must put
namesrv_plugin.py there, and the scripts' editable venv must have the checkout on sys.path."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import clean_env
from twisted_namesrv import __version__

REPO = Path(__file__).resolve().parents[1]
PLUGIN = "twisted/plugins/namesrv_plugin.py"
TIMEOUT = 120
#: runs twistd as the console script does, from a directory that is not the checkout
TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv = ['twistd', *sys.argv[1:]]; run()"

pytestmark = pytest.mark.packaging


def test_the_wheel_carries_the_plugin_but_no_plugin_cache(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert PLUGIN in names and "twisted_namesrv/web/status.html" in names
    assert not [n for n in names if n.endswith("dropin.cache") or n.startswith(("tests/", "twisted/__init__"))]


def test_twistd_finds_the_plugin_from_a_wheel_install(wheel, tmp_path):
    """A fresh venv holding only the wheel (--no-deps); Twisted and the other dependencies come from
    this interpreter's site-packages through a .pth line, which adds no checkout to the path."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                    "--target", str(site), str(wheel)], check=True, timeout=TIMEOUT, env=clean_env(tmp_path))
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run([str(python), "-c", "import twisted_namesrv; print(twisted_namesrv.__file__)"],
                           cwd=tmp_path, env=clean_env(tmp_path), capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(site)  # the wheel's copy, not the checkout
    result = subprocess.run([str(python), "-c", TWISTD, "namesrv", "--version"], cwd=tmp_path,
                            env=clean_env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert result.stdout.startswith(f"twisted-namesrv {__version__} "), result.stderr


@pytest.mark.skipif(Path(sys.executable).parent != REPO / ".venv" / "bin",
                    reason="checks the venv tools/setup-env.sh makes; these tests run another python")
def test_twistd_finds_the_plugin_in_the_scripts_venv_from_any_directory(tmp_path):
    python = REPO / ".venv" / "bin" / "python"
    where = subprocess.run([str(python), "-c", "from twisted.plugins import namesrv_plugin as p; print(p.__file__)"],
                           cwd=tmp_path, env=clean_env(tmp_path), capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()) == REPO / PLUGIN  # the checkout's file: edits apply without reinstalling
    result = subprocess.run([str(REPO / ".venv" / "bin" / "twistd"), "namesrv", "--version"], cwd=tmp_path,
                            env=clean_env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT)
    assert result.stdout.startswith(f"twisted-namesrv {__version__} "), result.stderr
