"""RocketMQ 5.x's controller: broker ids, master election and sync-state sets, embedded in the NameServer."""
