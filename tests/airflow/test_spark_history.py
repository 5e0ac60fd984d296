"""A local-mode run's own duration comes from a Spark history server when one is configured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.airflow import xcom_value
from tests.fixtures.spark import run_spark_task, spark_job


@pytest.mark.slow
@pytest.mark.spark
def test_local_run_duration_from_the_history_server(
    airflow_db: str, bellamy_store: Any, spark_local_conn: str, tmp_path: Path
) -> None:

    from tests.fixtures.spark import fetch_json, start_history_server

    with start_history_server(tmp_path / "events", base_dir=tmp_path / "hs") as history:
        dr = run_spark_task(
            "test_bellamy_spark_history",
            task_id="wordcount",
            conn_id=spark_local_conn,
            job_type="wordcount",
            properties={"machine_type": "loopback", "lines": 20000},
            scale_outs=[1, 2],
            default_scale_out=2,
            application=str(spark_job("wordcount")),
            application_args=["--lines", "20000", "--partitions", "4"],
            conf=history.spark_conf(),
            history_server_url=history.url,
        )
        result = xcom_value(dr, "wordcount")
        assert result["app_id"].startswith("local-")
        assert (
            result["runtime_source"]
            == f"history server ({result['app_id']}); history server executor add times"
        )
        app = fetch_json(f"{history.url}/api/v1/applications/{result['app_id']}")
        # local[2]: the driver's threads ran it from their start; the SparkContext's start-up is no runtime
        assert result["queue_s"] > 0
        assert result["runtime_s"] + result["queue_s"] == pytest.approx(
            app["attempts"][-1]["duration"] / 1000.0
        )
    (run,) = bellamy_store.list_runs("wordcount", limit=None)
    assert run["runtime_s"] == pytest.approx(result["runtime_s"]) and run["scale_out"] == 2
