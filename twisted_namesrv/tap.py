"""``twistd namesrv`` options and service, in twisted.names' pattern.

A configuration the server cannot run with ends the process with one line on stderr,
``namesrv: cannot start: <key and cause>`` (and the same as a critical event in the log), and
status 1 -- before daemonising where it can, so the shell that ran ``twistd namesrv`` sees it.
"""

from __future__ import annotations

import os
import platform
import sys
from collections import Counter
from typing import NoReturn

from twisted.copyright import version as twisted_version
from twisted.python import usage

from . import CannotStart, __version__, cannot_start_line, java_neighbours, java_opt
from .compat import PROFILES
from .launch import (
    cannot_start,
    log_written_to_the_end,
    report_cannot_start_in_one_line,
    take_over_twistd_logging,
    twistd_log_file,
    umask_from,
    warn_of,
)
from .logs import (
    DEFAULT_KEEP,
    DEFAULT_ROTATE,
    FORMATS,
    LEVELS,
    LogOptionError,
    configured_observer,
    hold_usr1_at_start,
    reopen_on_usr1,
    rotation,
    usr1_not_ours,
)
from .schema import SERVER_SCHEMA
from .state.config import ConfigError, NamesrvConfig


def version_line() -> str:
    return f"twisted-namesrv {__version__} (Twisted {twisted_version}, Python {platform.python_version()})\n"


class Options(usage.Options):
    synopsis = ("[-c FILE] [-n NAMESRV_LIST] [--port 9876] [--bind ADDR] [--data-dir DIR] [--compat 4.9.8|5.3.3] "
                "[--metrics-port N] [--metrics-bind ADDR] [--route-snapshot FILE] [--strict-config] [-p] [--version]")
    longdesc = "An Apache RocketMQ NameServer: brokers register, clients look up topic routes."
    optParameters = [
        ["configFile", "c", None, "Java properties file with NamesrvConfig keys (as mqnamesrv -c)"],
        ["port", None, None, "TCP port to listen on (listenPort, default 9876)"],
        ["bind", None, None, "address to listen on (bindAddress, default 127.0.0.1)"],
        ["data-dir", None, None, "directory for kvConfig.json and namesrv.properties (default ~/namesrv)"],
        ["kv-config-path", None, None, "the KV store file (kvConfigPath)"],
        ["compat", None, None, f"Java NameServer generation to emulate: {' or '.join(PROFILES)} (default 5.3.3)"],
        ["metrics-port", None, None, "serve /metrics, the status page and /api on this port (metricsPort; 0: off)"],
        ["metrics-bind", None, None, "address the HTTP side listens on (metricsBindAddress, default 127.0.0.1 "
         "whatever --bind says)"],
        ["http-allowed-hosts", None, None, "more names and addresses the HTTP side answers to, a,b,... "
         "(httpAllowedHosts: names, *.domain, addresses, CIDR; a Host naming none of them and not this "
         "machine is refused)"],
        ["route-snapshot", None, None, "keep routes across restarts in this file (routeSnapshotPath; see README)"],
        ["nsaddr-list", None, None, "what /rocketmq/nsaddr answers, host:port;host:port (nsaddrList; default: "
         "this server's own address)"],
        ["namesrvAddr", "n", None, "the other NameServers of this cluster, host:port;host:port, as mqnamesrv -n "
         "takes them (namesrvAddr): the status page compares routes with them"],
        ["advertised-address", None, None, "the address clients can reach this server at, host or host:port "
         "(advertisedAddress; also $NAMESRV_ADVERTISED_ADDRESS): what /rocketmq/nsaddr answers without nsaddrList"],
        ["tls-mode", None, None, "disabled, permissive (TLS and plain on one port) or enforcing (tls.server.mode)"],
        ["tls-cert", None, None, "server certificate, PEM (tls.server.certPath)"],
        ["tls-key", None, None, "its private key, PEM (tls.server.keyPath)"],
        ["controller-port", None, None, "run RocketMQ 5.x's controller (controller mode) on this port too "
         "(as enableControllerInNamesrv; docs/controller.md)"],
        ["controller-bind", None, None, "address the controller listens on (default: bindAddress)"],
        ["log-format", None, "text", "log 'text' or 'json' lines"],
        ["log-file", None, None, "log to this file (its directory created) instead of stdout; Java's is "
         "~/logs/rocketmqlogs/namesrv.log"],
        ["log-rotate", None, DEFAULT_ROTATE, "start a new --log-file past this size (128MB, 500K, 1G) or 'daily'"],
        ["log-keep", None, str(DEFAULT_KEEP), "rotated log files kept"],
        ["log-level", None, "info", f"leave out events below this level: {', '.join(LEVELS)}"],
    ]
    optFlags = [["printConfigItem", "p", "print every configuration key and exit"],
                ["strict-config", None, "refuse a -c file holding keys no NameServer setting has (else a warning)"]]

    def parseOptions(self, options=None) -> None:
        """Under twistd, a usage error is one line and status 2, not twistd's page of help."""
        try:
            super().parseOptions(options)
        except usage.UsageError as exc:
            if getattr(self, "parent", None) is None:
                raise
            sys.stderr.write(f"twistd namesrv: {exc} (try twistd namesrv --help)\n")
            raise SystemExit(2) from None

    def opt_h(self) -> NoReturn:
        """print this help and exit (mqnamesrv -h)"""
        self.opt_help()

    def opt_version(self) -> NoReturn:
        """print the versions of twisted-namesrv, Twisted and Python, and exit"""
        sys.stdout.write(version_line())
        sys.exit(0)

    def overrides(self) -> dict[str, object]:
        values: dict[str, object] = {}
        if self["data-dir"]:
            values["kvConfigPath"] = os.path.join(self["data-dir"], "kvConfig.json")
            if not self["configFile"]:  # with -c, updates go to that file (as mqnamesrv -c), not the data dir
                values["configStorePath"] = os.path.join(self["data-dir"], "namesrv.properties")
        for option, key in (("kv-config-path", "kvConfigPath"), ("bind", "bindAddress"), ("compat", "compatVersion"),
                            ("metrics-bind", "metricsBindAddress"), ("http-allowed-hosts", "httpAllowedHosts"),
                            ("route-snapshot", "routeSnapshotPath"), ("tls-mode", "tls.server.mode"),
                            ("nsaddr-list", "nsaddrList"), ("namesrvAddr", "namesrvAddr"),
                            ("advertised-address", "advertisedAddress"),
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

    def controller_port(self) -> int | None:
        if self["controller-port"] is None:
            return None
        try:
            return int(self["controller-port"])
        except ValueError:
            raise usage.UsageError(f"--controller-port: not a number: {self['controller-port']}") from None

    def __init__(self) -> None:
        super().__init__()
        #: the log writer's count of lines it could not write, for /metrics: made before both the service
        #: and the observer, since twistd calls makeService before it builds its logger (python -m, after)
        self.log_lines_lost: Counter[str] = Counter()
        #: twistd's logging the operator kept (``--logger NAME``, ``--syslog``), or None: ours writes the log
        self.own_logging: str | None = None

    def postOptions(self) -> None:
        hold_usr1_at_start()  # twistd's first call into ours: the config and the stores are read next
        self.controller_port()
        if self["log-format"] not in FORMATS:
            raise usage.UsageError(f"--log-format: {self['log-format']} is not one of {', '.join(FORMATS)}")
        self._check_log_options()
        self._no_pidfile_in_the_foreground()
        try:
            self.config = NamesrvConfig.from_file(self["configFile"], self.overrides(), bool(self["strict-config"]),
                                                  SERVER_SCHEMA)
        except (ConfigError, ValueError) as exc:
            cannot_start(str(exc))
        warn_of([*self.config.warnings, *java_opt.warnings(os.environ, self.config)])
        if self["printConfigItem"]:
            sys.stdout.write(self.config.all_keys_text())
            sys.exit(0)
        warn_of(java_neighbours.sharing(str(self.config["kvConfigPath"])))

    def _check_log_options(self) -> None:
        """Usage errors for the log options; under twistd, our observer replaces twistd's own (its
        --logger when any of ours asks for something else than its default; always its text observer,
        honouring its --logfile: ours escapes what peers send, twistd's writes it raw; not --syslog)."""
        try:
            rotation(self["log-rotate"])
        except LogOptionError as exc:
            raise usage.UsageError(str(exc)) from None
        if self["log-level"] not in LEVELS:
            raise usage.UsageError(f"--log-level: {self['log-level']} is not one of {', '.join(LEVELS)}")
        if not (self["log-keep"].isascii() and self["log-keep"].isdigit()):  # ('²' is a digit to isdigit, not int)
            raise usage.UsageError(f"--log-keep: not a number: {self['log-keep']}")
        self.own_logging = take_over_twistd_logging(self, self._logs_asked())

    def _no_pidfile_in_the_foreground(self) -> None:
        """``twistd -n namesrv`` writes no ./twistd.pid unless --pidfile says so: a second server
        started from the same directory would otherwise refuse ("Another twistd server is running")."""
        parent = getattr(self, "parent", None)
        if parent is not None and parent.get("nodaemon") and "pidfile" in parent and not any(
                arg.startswith("--pidfile") for arg in sys.argv[1:]):
            parent["pidfile"] = ""

    def _logs_asked(self) -> bool:
        return bool(self["log-file"]) or self["log-format"] != "text" or self["log-level"] != "info"

    def log_observer(self):
        """The observer the log options ask for; a --log-file that cannot be written exits 1 naming it."""
        try:
            observer = configured_observer(self["log-format"], self["log-file"] or twistd_log_file(self),
                                           self["log-rotate"], int(self["log-keep"]), self["log-level"])
        except LogOptionError as exc:
            raise SystemExit(cannot_start_line(exc)) from None
        if hasattr(observer.observer, "lost"):  # our LineWriter: it counts into the Counter makeService handed over
            observer.observer.lost = self.log_lines_lost
            # its file reopened on SIGUSR1 (logrotate's create), once the reactor runs: twistd asks for
            # the observer after makeService, python -m before, so the service cannot be handed it
            from twisted.internet import reactor

            reactor.callWhenRunning(reopen_on_usr1, reactor, observer.observer)
        return observer


def makeService(options: Options):
    from .service import NamesrvService

    report_cannot_start_in_one_line()
    log_written_to_the_end()
    umask_from()  # before the first file is made (the lock file, when the service starts)
    if options.own_logging:  # no file of ours to reopen: SIGUSR1 a line, not the end of the server
        from twisted.internet import reactor

        # once the reactor runs: twistd makes the operator's observer after makeService, and one
        # that installs its own SIGUSR1 handler (as twistd's: only over the default) keeps it
        reactor.callWhenRunning(usr1_not_ours, reactor, options.own_logging)
    try:  # every file the server starts from is read here, before twistd daemonises
        return NamesrvService.from_config(options.config, controller_port=options.controller_port(),
                                          controller_bind=options["controller-bind"],
                                          log_lines_lost=options.log_lines_lost)
    except CannotStart as exc:
        cannot_start(str(exc))
