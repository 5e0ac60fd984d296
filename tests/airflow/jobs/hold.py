"""A PySpark application that holds every executor core it is granted until a file appears (its
first argument; the executors run on this machine): another application has to wait for them."""

import os
import sys
import time

from pyspark.sql import SparkSession


def hold(_: int, release: str = sys.argv[1]) -> int:
    deadline = time.monotonic() + 600  # never hold a test cluster forever
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.2)
    return 1


spark = SparkSession.builder.appName("bellamy-test-hold").getOrCreate()
cores = int(spark.sparkContext.defaultParallelism)
spark.sparkContext.parallelize(range(cores), cores).map(hold).count()
spark.stop()
