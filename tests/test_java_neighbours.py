"""A Java NameServer still running on this server's KV store is named at the start (a fake /proc here;
the real Java 4.9.8 one, started with the same -c file, was named the same way by hand)."""

from __future__ import annotations

import os
from pathlib import Path

from twisted_namesrv import java_neighbours

JAVA = ["java", "-server", "-Xmx4g", "-cp", "lib/*", java_neighbours.MAIN_CLASS]


def fake_process(proc: Path, pid: int, args: list[str], cwd: Path) -> None:
    entry = proc / str(pid)
    entry.mkdir(parents=True)
    (entry / "cmdline").write_bytes(b"\0".join(arg.encode() for arg in args) + b"\0")
    os.symlink(cwd, entry / "cwd")


def test_a_java_nameserver_on_the_same_kv_store_is_named(tmp_path):
    """Its -c file's kvConfigPath (relative to its cwd), or its -Duser.home's namesrv directory."""
    proc, conf, data = tmp_path / "proc", tmp_path / "conf", tmp_path / "data"
    conf.mkdir()
    data.mkdir()
    (conf / "namesrv.properties").write_text(f"kvConfigPath={data}/kvConfig.json\n")
    fake_process(proc, 4242, [*JAVA, "-c", "namesrv.properties"], conf)
    fake_process(proc, 4343, ["python3", "-m", "http.server"], tmp_path)
    fake_process(proc, 4444, ["java", f"-Duser.home={tmp_path}/other", "-cp", "x", java_neighbours.MAIN_CLASS], conf)
    said = java_neighbours.sharing(str(data / "kvConfig.json"), proc)
    assert said == [f"a Java NameServer runs on {data} (pid 4242: java -server -Xmx4g -cp lib/* "
                    f"{java_neighbours.MAIN_CLASS} -c namesrv.properties): both would write kvConfig.json there, "
                    "each over the other's changes; stop it first (mqshutdown namesrv), or give this server another "
                    "--data-dir"]
    assert java_neighbours.sharing(str(tmp_path / "other" / "namesrv" / "kvConfig.json"), proc)[0].startswith(
        f"a Java NameServer runs on {tmp_path}/other/namesrv (pid 4444:")
    assert java_neighbours.sharing(str(tmp_path / "elsewhere" / "kvConfig.json"), proc) == []
