"""The configuration schema of a NameServer process: NamesrvConfig's own keys and those of the
controller it may run (``enableControllerInNamesrv``, ``--controller-port``), with the controller's
check, composed here as values and passed in by the launchers (tap.py, __main__.py) and the service
(service.py) to ``NamesrvConfig``: no module adds keys to another's table when imported, so ``-p``,
``--strict-config`` and ``is_secret`` say the same whatever was imported."""

from __future__ import annotations

from .controller.config import CONTROLLER_KEY_NAMES, JAVA_ONLY, NAMESRV_KEYS, check_store_keys
from .state.config import NAMESRV_SCHEMA, ConfigSchema

#: every key a NameServer's ``-c`` file may hold: the NameServer's, then the controller's store keys;
#: ControllerConfig's own keys are read from the same file by the controller (kept elsewhere), and Java's
#: controller keys it does not act on are known too (java_only)
SERVER_SCHEMA: ConfigSchema = NAMESRV_SCHEMA.with_keys(NAMESRV_KEYS, check_store_keys, CONTROLLER_KEY_NAMES,
                                                       JAVA_ONLY)
