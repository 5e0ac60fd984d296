"""Deterministic generated input for the example PySpark jobs.

Rows are made inside the JVM from ``spark.range`` (no Python workers, no input files),
so the jobs' work scales with ``--lines`` and the number of executors, not with disk.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

VOCABULARY = [
    "airflow", "spark", "flink", "deadline", "cluster", "runtime", "model", "scale",
    "executor", "driver", "shuffle", "partition", "stage", "task", "node", "budget",
]  # fmt: skip


def _word(seed: Column) -> Column:
    vocab = F.array(*[F.lit(w) for w in VOCABULARY])
    return F.element_at(vocab, (F.abs(seed) % len(VOCABULARY) + 1).cast("int"))


def text_lines(
    spark: SparkSession, lines: int, *, words_per_line: int = 12, partitions: int = 12, seed: int = 7
) -> DataFrame:
    """``lines`` rows of ``words_per_line`` pseudo-random vocabulary words each, column ``line``."""
    base = spark.range(0, lines, numPartitions=partitions)
    words = [_word(F.xxhash64(F.col("id"), F.lit(seed + i))) for i in range(words_per_line)]
    return base.select(F.col("id"), F.concat_ws(" ", *words).alias("line"))


def with_marker(frame: DataFrame, word: str, p_occurrence: float, seed: int = 11) -> DataFrame:
    """Append ``word`` to a deterministic ``p_occurrence`` share of the lines."""
    bucket = F.abs(F.xxhash64(F.col("id"), F.lit(seed))) % 1_000_000
    hit = bucket < F.lit(int(p_occurrence * 1_000_000))
    return frame.withColumn(
        "line", F.when(hit, F.concat_ws(" ", "line", F.lit(word))).otherwise(F.col("line"))
    )
