"""Types as a check: mypy finds nothing in the wire codec, the message bodies, the state (strict,
per pyproject.toml) and the layer that dispatches to them.  The Twisted-facing modules are left out:
without a zope.interface plugin mypy cannot read Twisted's interfaces (transport methods, reactor)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["twisted_namesrv/remoting", "twisted_namesrv/bodies", "twisted_namesrv/state",
           "twisted_namesrv/answer_cache.py", "twisted_namesrv/context.py", "twisted_namesrv/dispatch.py",
           "twisted_namesrv/processor.py", "twisted_namesrv/metrics.py", "twisted_namesrv/compat.py",
           "twisted_namesrv/steps.py", "twisted_namesrv/outages.py", "twisted_namesrv/system_topics.py",
           "twisted_namesrv/events.py", "twisted_namesrv/departures.py", "twisted_namesrv/lost_topics.py",
           "twisted_namesrv/flapping.py",
           "twisted_namesrv/schema.py", "twisted_namesrv/observations.py", "twisted_namesrv/properties.py",
           "twisted_namesrv/escapes.py", "twisted_namesrv/route_pieces.py", "twisted_namesrv/zone_routes.py",
           # the controller's pure modules, strict per pyproject.toml as the state is
           "twisted_namesrv/controller/events.py", "twisted_namesrv/controller/replicas.py",
           "twisted_namesrv/controller/elect.py", "twisted_namesrv/controller/heartbeat.py",
           "twisted_namesrv/controller/bodies.py", "twisted_namesrv/controller/codes.py",
           "twisted_namesrv/controller/config.py",
           # strict too (pyproject.toml): the layers above the state that pass as strictly
           "twisted_namesrv/audit.py", "twisted_namesrv/refusals.py",
           "twisted_namesrv/budget.py", "twisted_namesrv/starts.py", "twisted_namesrv/heap.py",
           "twisted_namesrv/apart.py", "twisted_namesrv/cluster_info.py", "twisted_namesrv/controller/headers.py",
           "twisted_namesrv/controller/audit.py", "twisted_namesrv/controller/metrics.py",
           "twisted_namesrv/controller/java_store.py", "twisted_namesrv/data_lock.py", "twisted_namesrv/hangup.py",
           "twisted_namesrv/unused_imports.py", "twisted_namesrv/sdnotify.py", "twisted_namesrv/port_holders.py",
           "twisted_namesrv/web/searches.py",
           "twisted_namesrv/file_writer.py", "twisted_namesrv/event_log.py", "twisted_namesrv/topology_store.py",
           "twisted_namesrv/controller/log.py", "twisted_namesrv/controller/manager.py", "twisted_namesrv/admin"]


def test_mypy_finds_nothing() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    # without PYTHONPATH: the checkout's twisted/ (the twistd plugins only) on it stands for Twisted, whose
    # types mypy then never reads, and an error in how a module uses Twisted passes unseen
    environ = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", *CHECKED], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=environ)
    assert done.returncode == 0, done.stdout + done.stderr
