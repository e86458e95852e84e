"""The truth of the real-capture corpus (tests/data/captures/real/*/TRUTH.json), built apart from the
report: its own pcap reader and frame splitter (packets.py), the NameServer's own log as the witness
of every broker event (server_logs.py: Java's namesrv.log or twisted-namesrv's log), and the steps file
for what packets cannot tell (build.py).  It shares no code with spark_analysis, so that the truth
test cannot agree with the report for the report's own reasons."""
