"""A Java NameServer still running on this server's KV store, found at the start.

The first hour of a move from ``mqnamesrv``: the operator starts this server beside the Java one
(another port, as the migration notes suggest) with the same ``-c`` file, or as the same user with
the default ``~/namesrv``.  Both then write one ``kvConfig.json``, each over the other's changes
(an ``updateKvConfig`` through one lost at the other's next write), and nothing says so: Java takes
no lock, so this server's own (data_lock.py) does not see it.  Here ``/proc`` is read once at the
start for ``NamesrvStartup`` processes and where each keeps its KV store, as Java works it out: the
``-c`` file's ``kvConfigPath``, else ``user.home`` (``-Duser.home``, else the home of the process's
user) + ``/namesrv/kvConfig.json``.  One in the same directory is a warning naming its pid and
command line and what to do; a process this user cannot read is left out (no guess).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from . import properties
from .port_holders import command_of

#: the class Java's mqnamesrv runs
MAIN_CLASS = "org.apache.rocketmq.namesrv.NamesrvStartup"
#: processes looked at, at most (a start on a host of many processes stays short)
MAX_PROCESSES = 100_000
#: the largest -c file of a Java NameServer read to find its kvConfigPath
CONFIG_LIMIT = 1 << 20


def _args(process: Path) -> list[str]:
    try:
        return [arg.decode("utf-8", "replace") for arg in (process / "cmdline").read_bytes().split(b"\0")]
    except OSError:
        return []


def _user_home(process: Path, args: list[str]) -> str | None:
    for arg in args:
        if arg.startswith("-Duser.home="):
            return arg.removeprefix("-Duser.home=")
    try:
        return pwd.getpwuid(process.stat().st_uid).pw_dir
    except (OSError, KeyError):
        return None


def _config_file(process: Path, args: list[str]) -> Path | None:
    """The ``-c`` / ``--configFile`` file after the main class, resolved against the process's cwd."""
    tail = args[args.index(MAIN_CLASS) + 1:]
    for at, arg in enumerate(tail):
        if arg in ("-c", "--configFile") and at + 1 < len(tail):
            name = tail[at + 1]
        elif arg.startswith("--configFile="):
            name = arg.partition("=")[2]
        else:
            continue
        try:
            return Path(os.path.join(os.readlink(process / "cwd"), name))
        except OSError:
            return None
    return None


def kv_directory(process: Path) -> Path | None:
    """Where the Java NameServer ``process`` keeps kvConfig.json, or None (not one, or not readable)."""
    args = _args(process)
    if MAIN_CLASS not in args:
        return None
    config = _config_file(process, args)
    if config is not None:
        try:
            with config.open("rb") as handle:
                text, _ = properties.decode_file(handle.read(CONFIG_LIMIT))
            path = properties.load(text).get("kvConfigPath", "").strip()
        except (OSError, properties.PropertiesError):
            return None
        if path:
            return Path(path).parent
    home = _user_home(process, args)
    return Path(home) / "namesrv" if home else None


def _same(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return os.path.realpath(one) == os.path.realpath(other)


def sharing(kv_config_path: str, proc: Path = Path("/proc")) -> list[str]:
    """A warning for each Java NameServer running with its KV store in ``kv_config_path``'s directory."""
    ours = Path(kv_config_path).parent
    said = []
    for count, process in enumerate(proc.glob("[0-9]*")):
        if count >= MAX_PROCESSES:
            break
        directory = kv_directory(process)
        if directory is not None and _same(directory, ours):
            said.append(f"a Java NameServer runs on {ours} (pid {process.name}: {command_of(process)}): both would "
                        "write kvConfig.json there, each over the other's changes; stop it first (mqshutdown "
                        "namesrv), or give this server another --data-dir")
    return said
