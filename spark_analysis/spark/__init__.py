"""Layer 6: the Spark session, workers, plan and job: the only layer that imports pyspark (and only
spark_analysis.__main__ imports it)."""
