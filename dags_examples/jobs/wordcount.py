"""Word count over generated text; prints the most frequent words."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _generated import VOCABULARY, text_lines
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName("bellamy-example-wordcount").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    started = time.monotonic()
    words = text_lines(spark, args.lines, partitions=args.partitions).select(
        F.explode(F.split(F.col("line"), " ")).alias("word")
    )
    counts = words.groupBy("word").count().orderBy(F.desc("count"), "word").collect()
    total = sum(r["count"] for r in counts)
    print(
        json.dumps(
            {
                "job": "wordcount",
                "app_id": spark.sparkContext.applicationId,
                "lines": args.lines,
                "words": total,
                "top": [[r["word"], r["count"]] for r in counts[:5]],
                "seconds": round(time.monotonic() - started, 3),
            }
        )
    )
    spark.stop()
    return 0 if total == 12 * args.lines and {r["word"] for r in counts} <= set(VOCABULARY) else 3


if __name__ == "__main__":
    sys.exit(main())
