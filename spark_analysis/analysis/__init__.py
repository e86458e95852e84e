"""Layer 4: liveness (how each broker's story went and ended), latency, clients, findings. Pure Python:
imports capture/, decode/ and model/ only."""
