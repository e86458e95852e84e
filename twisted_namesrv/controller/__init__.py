"""RocketMQ 5.x's controller (controller mode): broker ids, masters, epochs and sync-state sets.

Layers, as in the rest of the server: ``codes``/``bodies`` (wire) -> ``processor`` (a handler
per RequestCode) -> ``replicas``/``elect``/``heartbeat``/``events`` (pure state, clock injected)
-> ``manager`` (events through the log, elections, pushes) -> ``service`` (listener, scans).
docs/controller.md tells the whole story."""
