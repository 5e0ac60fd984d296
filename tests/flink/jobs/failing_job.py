"""A PyFlink BATCH job that fails inside the cluster, not in the client.

The input has one line that is not a number; ``CAST(line AS INT)`` only meets it while the
task runs, so the submission succeeds and the job then fails with a NumberFormatException.
"""

from __future__ import annotations

import os
import sys
import tempfile


def main() -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    directory = tempfile.mkdtemp(prefix="flink-failing-input-")
    with open(os.path.join(directory, "numbers.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(f"{i}\n" for i in range(1000))
        handle.write("not-a-number\n")
    output = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="flink-failing-output-")

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
