"""Layer 3: what the analysis reasons about - sessions, capture periods, broker identity, thresholds, the
typed tally the tasks return. Pure: imports capture/ and decode/ only."""
