"""Layer 2: one connection's captured commands -> rows (frames, calls, registrations, broker events), and
what the NameServer holds after each registration. Pure (pyarrow): imports capture/ only."""
