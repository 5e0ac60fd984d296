"""Sort: globally sort generated records by key and verify the order (the C3O "sort" job, in small)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _generated import text_lines
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName("bellamy-example-sort").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    started = time.monotonic()
    records = text_lines(spark, args.lines, words_per_line=6, partitions=args.partitions).withColumn(
        "key", F.sha2(F.col("line"), 256)
    )
    ordered = records.orderBy("key").select("key")
    # every key must be >= the one before it: a window over the sorted output checks the sort
    # across partition boundaries without collecting the data to the driver
    checked = ordered.withColumn("prev", F.lag("key").over(Window.orderBy(F.monotonically_increasing_id())))
    disorder = checked.filter(F.col("prev") > F.col("key")).count()
    total = ordered.count()
    print(
        json.dumps(
            {
                "job": "sort",
                "app_id": spark.sparkContext.applicationId,
                "lines": total,
                "out_of_order": disorder,
                "seconds": round(time.monotonic() - started, 3),
            }
        )
    )
    spark.stop()
    return 0 if disorder == 0 and total == args.lines else 3


if __name__ == "__main__":
    sys.exit(main())
