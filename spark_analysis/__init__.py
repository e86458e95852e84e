"""Offline analysis of NameServer packet captures: pcap reading, TCP reassembly, Spark jobs."""
