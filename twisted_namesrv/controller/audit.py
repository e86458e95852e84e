"""The controller's audit table (audit.py: ``Audited``): every code that changes its state, an
operator's (1009, 1011, 1002 with designateElect) and a broker's (1001, 1002, 1003, 1013), is one
audit event; heartbeats (904) only keep a broker alive.  Kept in the controller's room so that
audit.py, which the controller's service uses, imports nothing of the controller."""

from __future__ import annotations

from ..audit import Audited
from .codes import ControllerRequestCode, ControllerResponseCode

#: request code -> operation (the metric's label)
CONTROLLER_OPERATIONS: dict[int, str] = {
    ControllerRequestCode.UPDATE_CONTROLLER_CONFIG: "update_controller_config",
    ControllerRequestCode.CLEAN_BROKER_DATA: "clean_broker_data",
    ControllerRequestCode.CONTROLLER_ELECT_MASTER: "elect_master",
    ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: "alter_sync_state_set",
    ControllerRequestCode.CONTROLLER_REGISTER_BROKER: "register_broker_to_controller",
    ControllerRequestCode.CONTROLLER_APPLY_BROKER_ID: "apply_broker_id",
}
#: the controller's answers that are its state machine's decisions (a master not available, a fenced
#: epoch, a broker not alive...): declined, neither failed nor refused. A controller-mode cluster started
#: again after a full stop answers a broker outside the last sync-state set CONTROLLER_MASTER_NOT_AVAILABLE
#: every 5 s until a member of it is back: counted failed, that paged NamesrvAdminRequestsFailing ("could
#: not be saved", critical) for minutes; counted refused, NamesrvAdminRequestsRefused ("ACL, guarded key")
#: warned for five minutes after the group had its master again, over the broker doing its job. The wait
#: itself is the outage alerts' (the group without its master). A raft error (2015) and SYSTEM_ERROR (a
#: log append that failed) stay failed.
DECLINES = frozenset(code for code in ControllerResponseCode
                     if code >= 2000 and code != ControllerResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR)
CONTROLLER = Audited(CONTROLLER_OPERATIONS, {
    ControllerRequestCode.CLEAN_BROKER_DATA: ("clusterName", "brokerName", "brokerControllerIdsToClean",
                                              "isCleanLivingBroker"),
    ControllerRequestCode.CONTROLLER_ELECT_MASTER: ("clusterName", "brokerName", "brokerId", "designateElect"),
    ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: ("brokerName", "masterBrokerId", "masterEpoch"),
    ControllerRequestCode.CONTROLLER_REGISTER_BROKER: ("clusterName", "brokerName", "brokerId", "brokerAddress"),
    ControllerRequestCode.CONTROLLER_APPLY_BROKER_ID: ("clusterName", "brokerName", "appliedBrokerId"),
}, frozenset({ControllerRequestCode.UPDATE_CONTROLLER_CONFIG}), ("masterBrokerId", "masterEpoch"),
    lambda code: ControllerRequestCode(code).name, DECLINES)
