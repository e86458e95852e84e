"""Where tools/setup-env.sh (not of this package) asks for the class archive: ``from
spark_analysis.session import class_archive, whole``. The session itself is spark/session.py; this
name goes once setup-env.sh asks spark_analysis.spark.session."""

from spark_analysis.spark.session import class_archive, whole

__all__ = ["class_archive", "whole"]
