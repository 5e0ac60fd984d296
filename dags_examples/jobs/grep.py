"""Grep: count the generated lines that contain a word (the C3O "grep" job, in small)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _generated import text_lines, with_marker
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--word", default="bellamy")
    parser.add_argument("--p-occurrence", type=float, default=0.3)
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName("bellamy-example-grep").getOrCreate()
    started = time.monotonic()
    lines = with_marker(
        text_lines(spark, args.lines, partitions=args.partitions), args.word, args.p_occurrence
    )
    pattern = f"(^| ){args.word}( |$)"
    matches = lines.filter(F.col("line").rlike(pattern)).count()
    print(
        json.dumps(
            {
                "job": "grep",
                "app_id": spark.sparkContext.applicationId,
                "lines": args.lines,
                "matches": matches,
                "seconds": round(time.monotonic() - started, 3),
            }
        )
    )
    spark.stop()
    expected = args.p_occurrence * args.lines
    # the marker share is deterministic but hashed: a result far off means the job is wrong
    return 0 if abs(matches - expected) <= max(50, 0.02 * args.lines) else 3


if __name__ == "__main__":
    sys.exit(main())
