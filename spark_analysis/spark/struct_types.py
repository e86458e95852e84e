"""The decoded rows' schema as Spark sees it: derived from decode/schema.py's Arrow schema, defined once."""

from __future__ import annotations

from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis.decode import schema

#: what the decoding tasks send the JVM (decode/schema.py's DECODED)
DECODED = from_arrow_schema(schema.DECODED)
#: what they send it where they write the tables themselves (decode/schema.py's EVENTS)
EVENTS = from_arrow_schema(schema.EVENTS)
