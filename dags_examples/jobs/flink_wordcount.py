"""Word count over generated text, as a PyFlink Table API job in BATCH mode.

Submitted with ``flink run -py flink_wordcount.py -p N -- --lines ... --output ...``. The
client process (this script) first writes a deterministic text corpus, then Flink reads it,
splits lines into words, counts them and writes the counts as CSV. No Python UDF is used, so
the cluster's task managers run pure Java and need no Python of their own.

Adaptive batch auto-parallelism is switched off: otherwise Flink 2 picks each vertex's
parallelism from the data volume and ignores ``-p``, which is the very knob we size.

Runs with the Flink virtual environment's Python (PyFlink), never the Airflow one.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import sys
import tempfile

# 64 two-syllable words drawn with Zipf-like weights, as natural text is: a few words are
# frequent, most are rare, so the aggregation's key skew is realistic.
SYLLABLES = ("ka", "lo", "mi", "ra", "tu", "ve", "zo", "ne")
WORDS: tuple[str, ...] = tuple(a + b for a in SYLLABLES for b in SYLLABLES)
CUM_WEIGHTS: tuple[float, ...] = tuple(itertools.accumulate(1.0 / rank for rank in range(1, len(WORDS) + 1)))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000, help="lines of generated text")
    parser.add_argument("--words-per-line", type=int, default=12)
    parser.add_argument("--files", type=int, default=8, help="input files (splits the source reads)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--input-dir",
        default=None,
        help="where to write the corpus (default: one shared directory per corpus under the temp dir)",
    )
    parser.add_argument("--output", required=True, help="directory the word counts are written to")
    args = parser.parse_args(argv)
    for name in ("lines", "words_per_line", "files"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)}: must be >= 1")
    return args


def generate_corpus(directory: str, lines: int, words_per_line: int, files: int, seed: int) -> int:
    """Write ``lines`` lines of random words over ``files`` files; returns the bytes written."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    written = 0
    per_file = -(-lines // files)
    for index in range(files):
        count = min(per_file, lines - index * per_file)
        if count <= 0:
            break
        with open(os.path.join(directory, f"part-{index:04d}.txt"), "w", encoding="utf-8") as handle:
            for _ in range(count):
                line = " ".join(rng.choices(WORDS, cum_weights=CUM_WEIGHTS, k=words_per_line)) + "\n"
                handle.write(line)
                written += len(line)
    return written


def shared_corpus(lines: int, words_per_line: int, files: int, seed: int) -> tuple[str, int]:
    """The corpus for these arguments in one directory under the temp dir, written once.

    Under ``--detached`` this client exits before the cluster reads its input, so it cannot
    delete what it wrote; a fresh directory per run would leave one corpus (tens of MB) behind
    for every run of a daily job. The corpus is deterministic, so runs with the same arguments
    share one. It is written to a private directory and renamed into place, so a job that is
    reading it never sees a half-written file.
    """
    name = f"flink-wordcount-corpus-{lines}x{words_per_line}-{files}f-s{seed}"
    target = os.path.join(tempfile.gettempdir(), name)
    if not os.path.isdir(target):
        staging = tempfile.mkdtemp(prefix=f".{name}-")
        generate_corpus(staging, lines, words_per_line, files, seed)
        try:
            os.rename(staging, target)
        except OSError:  # another run put the same corpus in place first
            shutil.rmtree(staging, ignore_errors=True)
    size = sum(entry.stat().st_size for entry in os.scandir(target))
    return target, size


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    from pyflink.table import EnvironmentSettings, TableEnvironment

    if args.input_dir:
        input_dir = args.input_dir
        size = generate_corpus(input_dir, args.lines, args.words_per_line, args.files, args.seed)
    else:
        input_dir, size = shared_corpus(args.lines, args.words_per_line, args.files, args.seed)
    print(f"corpus of {args.lines} lines ({size / 1e6:.1f} MB) in {input_dir}", flush=True)

    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    conf = env.get_config()
    conf.set("execution.batch.adaptive.auto-parallelism.enabled", "false")
    conf.set("pipeline.name", f"bellamy-wordcount-{args.lines}")

    # Paths reach SQL as literals: quote them the SQL way rather than trusting the caller.
    def literal(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    env.execute_sql(
        f"""CREATE TEMPORARY TABLE corpus (line STRING) WITH (
            'connector' = 'filesystem', 'path' = {literal(input_dir)}, 'format' = 'raw')"""
    )
    env.execute_sql(
        f"""CREATE TEMPORARY TABLE counts (word STRING, cnt BIGINT) WITH (
            'connector' = 'filesystem', 'path' = {literal(args.output)}, 'format' = 'csv')"""
    )
    result = env.execute_sql(
        """INSERT INTO counts
           SELECT word, COUNT(*) AS cnt
           FROM corpus CROSS JOIN UNNEST(SPLIT(line, ' ')) AS t (word)
           WHERE word <> ''
           GROUP BY word"""
    )
    # Under `flink run --detached` this returns as soon as the job is submitted; the job id is
    # also printed by the CLI, but printing it here keeps local runs informative.
    client = result.get_job_client()
    if client is not None:
        print(f"submitted word count as job {client.get_job_id()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
