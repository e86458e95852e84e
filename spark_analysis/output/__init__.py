"""Layer 5: what is written - summary.json, brokers.csv, clients.csv, report.html, the Parquet part files.
Imports the layers below, never pyspark."""
