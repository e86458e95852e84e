"""A read-only ``-c`` file, as Kubernetes mounts a ConfigMap (issue 46 item 4), met as an operator
meets it: the real server in a mount namespace of its own (``unshare -m``) with its configuration
volume read-only, or the file alone bind-mounted read-only (a ConfigMap's ``subPath``), and
``namesrv-admin updateNamesrvConfig`` from outside. As Java does, the change is applied in memory;
the answer, the log, the metrics and a restart agree that it lasts until the restart."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import free_port, wait_http

ADMIN = Path(sys.executable).parent / "namesrv-admin"
MOUNTS = {
    # the ConfigMap as a volume: the whole directory read-only
    "volume": 'cp "$SRC" "$ETC/namesrv.properties"; mount --bind "$ETC" "$ETC"; mount -o remount,bind,ro "$ETC"',
    # the ConfigMap's one key with subPath: the file alone, bind-mounted read-only into a writable directory
    "subPath": 'touch "$ETC/namesrv.properties"; mount --bind "$SRC" "$ETC/namesrv.properties"; '
               'mount -o remount,bind,ro "$ETC/namesrv.properties"',
}


def metrics(http: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def start(tmp_path: Path, mount: str, port: int, http: int) -> subprocess.Popen:
    """The server on ``etc/namesrv.properties`` mounted read-only as ``mount`` says, in a mount
    namespace that ends with it; its log on stdout."""
    script = f'set -e; mount --make-rprivate /; {MOUNTS[mount]}; exec "$@"'
    env = {**os.environ, "SRC": str(tmp_path / "configmap" / "namesrv.properties"), "ETC": str(tmp_path / "etc")}
    return subprocess.Popen(["unshare", "-m", "bash", "-c", script, "bash", sys.executable, "-m", "twisted_namesrv",
                             "-c", str(tmp_path / "etc" / "namesrv.properties"), "--port", str(port),
                             "--metrics-port", str(http), "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def wait_ready(server: subprocess.Popen, http: int) -> None:
    wait_http(server, f"http://127.0.0.1:{http}/healthz")


def stop(server: subprocess.Popen) -> str:
    server.terminate()
    return server.communicate(timeout=30)[0]


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="a read-only mount in a mount namespace of its own needs root and unshare")
@pytest.mark.parametrize("mount", list(MOUNTS))
def test_a_runtime_change_on_a_read_only_configmap_lasts_until_the_restart(tmp_path, mount):
    (tmp_path / "configmap").mkdir()
    (tmp_path / "etc").mkdir()
    source = tmp_path / "configmap" / "namesrv.properties"
    source.write_text("orderMessageEnable=false\n")
    port, http = free_port(), free_port()
    server = start(tmp_path, mount, port, http)
    try:
        wait_ready(server, http)
        done = subprocess.run([str(ADMIN), "-n", f"127.0.0.1:{port}", "updateNamesrvConfig", "-k",
                               "orderMessageEnable", "-v", "true"], capture_output=True, text=True, timeout=60)
        seen = metrics(http)
    finally:
        log = stop(server)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"update name server config in name server[127.0.0.1:{port}] OK: "
                                  "orderMessageEnable = true (was false); applied in memory only, until the "
                                  f"restart: cannot save configStorePath {tmp_path}/etc/namesrv.properties: "
                                  "Read-only file system (EROFS)"), done.stdout
    assert seen[("namesrv_config_unsaved", ())] == 1
    assert seen[("namesrv_store_write_failures_total", (("error", "EROFS"), ("store", "configStorePath")))] == 1
    assert "applied in memory only, until the restart" in log and "updateNamesrvConfig from 127.0.0.1:" in log, log
    assert source.read_text() == "orderMessageEnable=false\n"
    # the restart goes back to the file, and says nothing is unsaved
    server = start(tmp_path, mount, port, http)
    try:
        wait_ready(server, http)
        seen = metrics(http)
        read = subprocess.run([str(ADMIN), "-n", f"127.0.0.1:{port}", "getNamesrvConfig"], capture_output=True,
                              text=True, timeout=60)
    finally:
        stop(server)
    assert seen[("namesrv_config_unsaved", ())] == 0
    assert "orderMessageEnable = false" in " ".join(read.stdout.split()), read.stdout
