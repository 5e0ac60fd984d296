"""A PySpark application that starts a session and then fails, as a broken job would."""

import sys

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("bellamy-test-fail").getOrCreate()
spark.range(10).count()
spark.stop()
sys.exit(7)
