"""``twistd namesrv-controller``: the controller on its own, as Java's ControllerStartup (mqcontroller).

``-c FILE`` holds the controller keys (controllerDLegerPeers/SelfId name the listen address, or
``--port``/``--bind``), read by the same reader as the NameServer's ``-c`` (state/config.py:
``read_properties_file``, ``check_file_keys``): a key the controller does not know is a warning on stderr
and in the log (``--strict-config`` refuses it); a configuration it cannot run with ends it with one
line on stderr."""

from __future__ import annotations

from typing import Any

from twisted.python import usage

from .. import CannotStart
from ..launch import (
    cannot_start,
    log_written_to_the_end,
    report_cannot_start_in_one_line,
    take_over_twistd_logging,
    twistd_log_file,
    umask_from,
    warn_of,
)
from ..logs import configured_observer, hold_usr1_at_start, reopen_on_usr1, usr1_not_ours
from ..state.config import ConfigError, ConfigSchema, check_file_keys, read_properties_file
from .config import CONTROLLER_KEY_NAMES, ControllerConfig, ControllerConfigError

#: the keys a standalone controller's ``-c`` file may hold: ControllerConfig's (it converts and checks them)
CONTROLLER_FILE_SCHEMA = ConfigSchema((), kept_elsewhere=CONTROLLER_KEY_NAMES)


class Options(usage.Options):
    synopsis = "[-c FILE] [--port 9878] [--bind 127.0.0.1] [--strict-config]"
    longdesc = "RocketMQ 5.x's controller (controller mode): broker ids, masters, sync-state sets."
    optParameters = [
        ["configFile", "c", None, "Java properties file with ControllerConfig keys (as mqcontroller -c)"],
        ["port", None, None, "TCP port (default: this controller's entry of controllerDLegerPeers, else 9878)"],
        ["bind", None, "127.0.0.1", "address to listen on"],
    ]
    optFlags = [["strict-config", None, "refuse a -c file holding keys the controller does not know (else a warning)"]]
    #: twistd's logging the operator kept (``--logger NAME``, ``--syslog``), or None: ours writes the log
    own_logging: str | None = None

    def postOptions(self) -> None:
        hold_usr1_at_start()  # until the log is set up (logs.py), SIGUSR1 must not end the start
        self.own_logging = take_over_twistd_logging(self)  # escaped lines (logs.py), to twistd's --logfile or stdout
        props: dict[str, str] = {}
        if self["configFile"]:
            try:
                props, warnings = read_properties_file(self["configFile"])
                warnings += check_file_keys(self["configFile"], props, self["strict-config"], CONTROLLER_FILE_SCHEMA)
            except ConfigError as exc:
                cannot_start(str(exc))
            warn_of(warnings)
        try:
            self.config = ControllerConfig.from_properties(props)
            self.config.self_peer()
        except ControllerConfigError as exc:
            cannot_start(str(exc))
        if self["port"] is not None:
            try:
                self["port"] = int(self["port"])
            except ValueError:
                raise usage.UsageError(f"--port: not a number: {self['port']}") from None

    def log_observer(self) -> Any:
        """Text lines as the NameServer writes them (logs.py), where twistd would write its own; its
        file reopened on SIGUSR1, as the NameServer's (twistd's own observer rotated its file then,
        ours had no handler: logrotate's postrotate ended the controller)."""
        observer = configured_observer("text", twistd_log_file(self))
        from twisted.internet import reactor

        reopen_on_usr1(reactor, observer.observer)  # now: it says it listens before the reactor runs
        return observer


def makeService(options: Options) -> Any:
    from .service import ControllerService

    report_cannot_start_in_one_line()
    log_written_to_the_end()
    umask_from()  # its store's files, as the NameServer's (launch.py)
    if options.own_logging:  # no file of ours to reopen: SIGUSR1 a line, not the end of the controller
        from twisted.internet import reactor

        # once the reactor runs: twistd makes the operator's observer after makeService, and one
        # that installs its own SIGUSR1 handler (as twistd's: only over the default) keeps it
        reactor.callWhenRunning(usr1_not_ours, reactor, options.own_logging)
    try:
        return ControllerService(options.config, port=options["port"], bind=options["bind"])
    except CannotStart as exc:
        cannot_start(str(exc))
