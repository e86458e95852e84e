"""Reading captures of NameServer traffic, without Spark: pcap and pcapng records (``records``),
link layers down to TCP segments (``packets``), TCP reassembly (``reassembly``) and the remoting
commands of each connection (``conversation``, through the server's own codec).

The Spark job runs these in its tasks; the replay test, the codec tests and the fuzzer read
captures with them directly. Nothing here imports Spark.
"""
