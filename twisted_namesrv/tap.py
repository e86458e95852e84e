"""``twistd namesrv`` options and service, in twisted.names' pattern."""

from __future__ import annotations

import os
import sys

from twisted.python import usage

from .compat import PROFILES
from .logs import FORMATS
from .state.acl import AclConfigError
from .state.config import ConfigError, NamesrvConfig
from .state.kv import KVConfigError


class Options(usage.Options):
    synopsis = ("[-c FILE] [--port 9876] [--bind ADDR] [--data-dir DIR] [--compat 4.9.8|5.3.3] [--metrics-port N] "
                "[--route-snapshot FILE] [-p]")
    longdesc = "An Apache RocketMQ NameServer: brokers register, clients look up topic routes."
    optParameters = [
        ["configFile", "c", None, "Java properties file with NamesrvConfig keys (as mqnamesrv -c)"],
        ["port", None, None, "TCP port to listen on (listenPort, default 9876)"],
        ["bind", None, None, "address to listen on (bindAddress, default 127.0.0.1)"],
        ["data-dir", None, None, "directory for kvConfig.json and namesrv.properties (default ~/namesrv)"],
        ["kv-config-path", None, None, "the KV store file (kvConfigPath)"],
        ["compat", None, None, f"Java NameServer generation to emulate: {' or '.join(PROFILES)} (default 5.3.3)"],
        ["metrics-port", None, None, "serve /metrics, the status page and /api on this port (metricsPort; 0: off)"],
        ["route-snapshot", None, None, "keep routes across restarts in this file (routeSnapshotPath; see README)"],
        ["tls-mode", None, None, "disabled, permissive (TLS and plain on one port) or enforcing (tls.server.mode)"],
        ["tls-cert", None, None, "server certificate, PEM (tls.server.certPath)"],
        ["tls-key", None, None, "its private key, PEM (tls.server.keyPath)"],
        ["log-format", None, "text", "python -m twisted_namesrv logs 'text' or 'json' lines (twistd: use "
         "--logger twisted_namesrv.logs.json_lines)"],
    ]
    optFlags = [["printConfigItem", "p", "print every configuration key and exit"]]

    def overrides(self) -> dict[str, object]:
        values: dict[str, object] = {}
        if self["data-dir"]:
            values["kvConfigPath"] = os.path.join(self["data-dir"], "kvConfig.json")
            if not self["configFile"]:  # with -c, updates go to that file (as mqnamesrv -c), not the data dir
                values["configStorePath"] = os.path.join(self["data-dir"], "namesrv.properties")
        for option, key in (("kv-config-path", "kvConfigPath"), ("bind", "bindAddress"), ("compat", "compatVersion"),
                            ("route-snapshot", "routeSnapshotPath"), ("tls-mode", "tls.server.mode"),
                            ("tls-cert", "tls.server.certPath"), ("tls-key", "tls.server.keyPath")):
            if self[option]:
                values[key] = self[option]
        for option, key in (("port", "listenPort"), ("metrics-port", "metricsPort")):
            if self[option]:
                try:
                    values[key] = int(self[option])
                except ValueError:
                    raise usage.UsageError(f"--{option}: not a number: {self[option]}") from None
        return values

    def postOptions(self) -> None:
        if self["log-format"] not in FORMATS:
            raise usage.UsageError(f"--log-format: {self['log-format']} is not one of {', '.join(FORMATS)}")
        try:
            self.config = NamesrvConfig.from_file(self["configFile"], self.overrides())
        except (ConfigError, ValueError) as exc:
            raise usage.UsageError(str(exc)) from None
        if self["printConfigItem"]:
            sys.stdout.write(self.config.all_keys_text())
            sys.exit(0)


def makeService(options: Options):
    from .service import NamesrvService

    try:
        return NamesrvService(options.config)
    except KVConfigError as exc:
        raise SystemExit(f"{exc}; fix or move the file, the NameServer will not start with it") from None
    except (AclConfigError, ConfigError) as exc:
        raise SystemExit(str(exc)) from None
