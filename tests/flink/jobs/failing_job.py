"""A PyFlink BATCH job that fails inside the cluster, not in the client.

The input has one line that is not a number; ``CAST(line AS INT)`` only meets it while the
task runs, so the submission succeeds and the job then fails with a NumberFormatException.

Usage: ``failing_job.py WORKDIR``: the input goes to ``WORKDIR/input``, the output (never
written: the job fails) to ``WORKDIR/output``. The test owns WORKDIR (its ``tmp_path``): the
client returns once the job is submitted and the cluster reads the input after that, so this
script cannot remove what it wrote; a directory of its own under /tmp per run was left behind.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: failing_job.py WORKDIR (a directory the caller owns and removes)")
    from pyflink.table import EnvironmentSettings, TableEnvironment

    workdir = os.path.abspath(sys.argv[1])
    directory = os.path.join(workdir, "input")
    output = os.path.join(workdir, "output")
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "numbers.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(f"{i}\n" for i in range(1000))
        handle.write("not-a-number\n")

    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    env.get_config().set("execution.batch.adaptive.auto-parallelism.enabled", "false")
    env.get_config().set("pipeline.name", "bellamy-failing-job")
    env.execute_sql(
        f"CREATE TEMPORARY TABLE numbers (line STRING) WITH "
        f"('connector' = 'filesystem', 'path' = '{directory}', 'format' = 'raw')"
    )
    env.execute_sql(
        f"CREATE TEMPORARY TABLE total (s BIGINT) WITH "
        f"('connector' = 'filesystem', 'path' = '{output}', 'format' = 'csv')"
    )
    env.execute_sql("INSERT INTO total SELECT SUM(CAST(line AS INT)) FROM numbers")


if __name__ == "__main__":
    main()
